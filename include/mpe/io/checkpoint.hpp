// SPDX-License-Identifier: Apache-2.0
/// @file mpe/io/checkpoint.hpp
/// @brief Checkpoints of CachedEmbedding: the definitions of save() and load(), and the
/// same bytes in memory (save_to_bytes(), load_from_bytes()).
///
/// The core (mpe/embedding/cached_embedding.hpp) declares save()/load() but holds no file code;
/// this header supplies it (mpe/mpe.hpp includes it). The byte format (MPECKPT1, version
/// 4, kVersion) is documented in mpe/io/checkpoint_format.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "mpe/backend/buffer.hpp"
#include "mpe/cache/all.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/kernels/all.hpp"
#include "mpe/io/checkpoint_format.hpp"
#include "mpe/optim/all.hpp"
#include "mpe/optim/state_precision.hpp"
#include "mpe/storage/all.hpp"

// The writer and reader (a body of this header; it includes nothing itself).
#include "mpe/detail/io/checkpoint.inl"

namespace mpe::io {

/// The file side of CachedEmbedding::save() / load() (the default `Io` of both).
struct CheckpointFile {
  /// Writes `e`'s exact state to `path` atomically: a temporary file beside it, fsync,
  /// rename over `path`, fsync of the directory. Waits for `e`'s queued work. Throws
  /// std::system_error (a std::runtime_error) naming the path on any I/O failure; the
  /// temporary file is removed and a previous file at `path` is untouched.
  template <class Embedding>
  static void save(const Embedding& e, const std::filesystem::path& path) {
    ::mpe::detail::CheckpointAccess::save(e, path);
  }

  /// Reads the whole file at `path`, verifies all of it (magic, version, policies,
  /// shapes, CRC-32C checksums, values) and only then replaces `e`'s state. A pending
  /// deferred validation error of `e` is thrown first (nothing loaded). Throws
  /// mpe::checkpoint_error naming the path and the first fault, or std::invalid_argument
  /// naming both precisions when the file's optimizer-state precision is not the
  /// object's; `e` is then unchanged.
  template <class Embedding>
  static void load(Embedding& e, const std::filesystem::path& path) {
    e.throw_deferred();
    const std::string prefix = "mpe::CachedEmbedding::load: '" + path.string() + "': ";
    const std::vector<std::uint8_t> bytes = ::mpe::detail::ckpt::read_file(path, prefix);
    ::mpe::detail::CheckpointAccess::load_bytes(e, bytes.data(), bytes.size(), path.string());
  }

  /// The bytes save() would write, in host memory (no file). Waits for `e`'s queued work.
  template <class Embedding>
  static std::vector<std::uint8_t> to_bytes(const Embedding& e) {
    return ::mpe::detail::CheckpointAccess::save_bytes(e);
  }

  /// load() from bytes in host memory; `source` names them in messages.
  template <class Embedding>
  static void from_bytes(Embedding& e, std::span<const std::uint8_t> bytes, const std::string& source) {
    e.throw_deferred();
    ::mpe::detail::CheckpointAccess::load_bytes(e, bytes.data(), bytes.size(), source);
  }
};

/// A checkpoint in host memory: exactly the bytes CachedEmbedding::save() writes to a file
/// (format MPECKPT1, docs/checkpoint_format.md), for callers that keep state in their own
/// containers (a PyTorch state_dict, an object store). Waits for `e`'s queued work.
/// `e`: a CachedEmbedding of any policies and backend. Throws what the reads of backend
/// memory throw; never touches the file system.
template <class Embedding>
std::vector<std::uint8_t> save_to_bytes(const Embedding& e) {
  return CheckpointFile::to_bytes(e);
}

/// Replaces `e`'s state with the checkpoint in `bytes` (host memory) after verifying all
/// of it, exactly as CachedEmbedding::load() verifies a file. Throws mpe::checkpoint_error
/// naming `source` and the first fault, std::invalid_argument for a state precision that
/// is not `e`'s, or `e`'s pending deferred validation error; `e` is then unchanged.
template <class Embedding>
void load_from_bytes(Embedding& e, std::span<const std::uint8_t> bytes,
                     const std::string& source = "in-memory checkpoint") {
  CheckpointFile::from_bytes(e, bytes, source);
}

}  // namespace mpe::io
