// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/weights.inl
/// @brief CachedEmbedding: set_weights / get_weights / init_uniform (whole-row writes with
/// rounding) (included by mpe/embedding/cached_embedding.hpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "mpe/detail/kernels/all.hpp"

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::write_rows(const float* src,
                                                                                    index_t first,
                                                                                    index_t count,
                                                                                    num::RoundingSite site) {
  admit_pending();  // a pending admission fills from the rows as they were before this write
  if (const detail::StateRef state = state_ref(); state.active() && num_sets_ > 0) {
    backend_.for_each(count, detail::KeepStateOfRows<Rounding>{cache_ref(), state, first, step_ptr(),
                                                               &counters_.data()->stats.saturated_rows});
  }
  backend_.for_each(
      count, detail::WriteRows<Storage, Rounding, Paths>{cache_ref(), store_.data(), stride_, first, src,
                                                         row_stream(), step_ptr(), site});
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::set_weights(
    std::span<const float> weights, std::int64_t first_row) {
  const char* fn = "set_weights";
  throw_deferred();
  check_row_range(fn, "weights", weights.size(), first_row);
  const index_t count = static_cast<index_t>(weights.size()) / config_.dim;
  if (count == 0) return;
  detail::Buffer<float, Backend> staged;
  const float* src = weights.data();
  if constexpr (Backend::device_spans) {
    staged = detail::Buffer<float, Backend>(backend_, weights.size());
    backend_.copy_from_host(staged.data(), weights.data(), weights.size_bytes());
    src = staged.data();
  }
  index_t none = detail::kNoError;
  backend_.copy_from_host(error_.data(), &none, sizeof none);
  backend_.for_each(count, detail::CheckRepresentable<Storage>{src, config_.dim, error_.data()});
  if (const index_t i = read_scalar(error_.data()); i != detail::kNoError) {
    detail::invalid(fn, "weights[" + std::to_string(i) +
                            "] = " + format_float(weights[static_cast<std::size_t>(i)]) + " (row " +
                            std::to_string(first_row + i / config_.dim) + ") cannot be stored as " +
                            Storage::name + " (non-finite or |x| > " + format_float(Storage::limit) + ")");
  }
  write_rows(src, first_row, count, num::RoundingSite::SetWeights);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::get_weights(
    std::span<float> out, std::int64_t first_row) const {
  check_row_range("get_weights", "out", out.size(), first_row);
  const index_t count = static_cast<index_t>(out.size()) / config_.dim;
  if (count == 0) return;
  if constexpr (Backend::device_spans) {
    detail::Buffer<float, Backend> staged(backend_, out.size());
    backend_.for_each(count, detail::ReadRows<Storage>{ref(), first_row, staged.data()});
    backend_.copy_to_host(out.data(), staged.data(), out.size_bytes());
  } else {
    backend_.for_each(count, detail::ReadRows<Storage>{ref(), first_row, out.data()});
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::init_uniform(float low, float high) {
  const char* fn = "init_uniform";
  if (!num::is_finite(low) || !num::is_finite(high) || !(low < high) || low < -Storage::limit ||
      high > Storage::limit) {
    detail::invalid(fn, "[low, high) = [" + format_float(low) + ", " + format_float(high) +
                            ") must be finite, non-empty and within +-" + format_float(Storage::limit));
  }
  detail::Buffer<float, Backend> buf;
  init_rows(0, num_tables(), low, high, buf);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::init_uniform(
    std::span<const float> low, std::span<const float> high) {
  const char* fn = "init_uniform";
  const std::int64_t T = num_tables();
  for (const auto& [name, v] : {std::pair{"low", low}, std::pair{"high", high}}) {
    if (static_cast<std::int64_t>(v.size()) != T) {
      detail::invalid(fn, std::string(name) + ".size() = " + std::to_string(v.size()) +
                              "; expected one value per table, T = " + std::to_string(T));
    }
  }
  for (std::int64_t t = 0; t < T; ++t) {
    const float l = low[static_cast<std::size_t>(t)], h = high[static_cast<std::size_t>(t)];
    if (!num::is_finite(l) || !num::is_finite(h) || !(l < h) || l < -Storage::limit || h > Storage::limit) {
      detail::invalid(fn, "table " + std::to_string(t) + ": [low[" + std::to_string(t) + "], high[" +
                              std::to_string(t) + "]) = [" + format_float(l) + ", " + format_float(h) +
                              ") must be finite, non-empty and within +-" + format_float(Storage::limit));
    }
  }
  detail::Buffer<float, Backend> buf;
  // Consecutive tables of one range in one pass (every table at one range: init_uniform(l, h)'s calls).
  for (std::int64_t t0 = 0; t0 < T;) {
    const float l = low[static_cast<std::size_t>(t0)], h = high[static_cast<std::size_t>(t0)];
    std::int64_t t1 = t0 + 1;
    while (
        t1 < T &&
        std::bit_cast<std::uint32_t>(low[static_cast<std::size_t>(t1)]) == std::bit_cast<std::uint32_t>(l) &&
        std::bit_cast<std::uint32_t>(high[static_cast<std::size_t>(t1)]) == std::bit_cast<std::uint32_t>(h)) {
      ++t1;
    }
    init_rows(t0, t1, l, h, buf);
    t0 = t1;
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::init_rows(
    std::int64_t t0, std::int64_t t1, float low, float high, detail::Buffer<float, Backend>& buf) {
  const index_t begin = table_offsets_host_[static_cast<std::size_t>(t0)];
  const index_t end = table_offsets_host_[static_cast<std::size_t>(t1)];
  const index_t chunk = std::min<index_t>(65536, total_rows_);
  if (buf.size() == 0)
    buf = detail::Buffer<float, Backend>(backend_, static_cast<std::size_t>(chunk) * config_.dim);
  for (index_t first = begin; first < end; first += chunk) {
    const index_t count = std::min(chunk, end - first);
    backend_.for_each(count, detail::UniformRows{row_stream(), first, config_.dim, low, high, buf.data()});
    write_rows(buf.data(), first, count, num::RoundingSite::Init);
  }
}

}  // namespace mpe
