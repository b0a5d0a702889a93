// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/mixed_dim_checkpoint.inl
/// @brief MixedDimEmbedding: the MPEMIXD1 container: save_bytes and the file forms save / load
/// (included by mpe/embedding/mixed_dim_embedding.hpp; load_bytes, the verifying reader,
/// is defined in the class).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline std::vector<std::uint8_t>
MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::save_bytes() const {
  detail::ckpt::Bytes b;
  b.raw(kMagic, 8);
  b.put(kVersion);
  b.put(static_cast<std::uint32_t>(layout_.T()));
  for (std::int64_t t = 0; t < layout_.T(); ++t) {
    b.put(static_cast<std::int64_t>(layout_.rows[static_cast<std::size_t>(t)]));
    b.put(static_cast<std::int32_t>(layout_.dims[static_cast<std::size_t>(t)]));
  }
  b.put(static_cast<std::uint32_t>(groups_.size()));
  for (const auto& e : groups_) {
    const std::vector<std::uint8_t> g = io::save_to_bytes(e);
    b.put(static_cast<std::uint64_t>(g.size()));
    b.raw(g.data(), g.size());
  }
  b.put(io::checkpoint::crc32c(b.v.data(), b.v.size()));
  return std::move(b.v);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::save(
    const std::filesystem::path& path) const {
  const std::vector<std::uint8_t> bytes = save_bytes();
  detail::ckpt::AtomicWriter w(path);
  w.write(bytes.data(), bytes.size());
  w.commit();
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::load(
    const std::filesystem::path& path) {
  const std::vector<std::uint8_t> bytes =
      detail::ckpt::read_file(path, "mpe::MixedDimEmbedding::load: '" + path.string() + "': ");
  load_bytes(bytes, path.string());
}

}  // namespace mpe
