// SPDX-License-Identifier: Apache-2.0
/// @file mpe/io/checkpoint.hpp
/// @brief Checkpoints of CachedEmbedding: io::save() and io::load() (the bodies of
/// CachedEmbedding::save() / load()), and the same bytes in memory (save_to_bytes(),
/// load_from_bytes()).
///
/// The core (mpe/embedding/cached_embedding.hpp) declares save()/load() but holds no file code;
/// this header supplies it (mpe/mpe.hpp includes it), written over the table's public state
/// interface (CachedEmbedding::state(), restore_state(), TableState). The byte format
/// (MPECKPT1, version 4, kVersion) is documented in mpe/io/checkpoint_format.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "mpe/backend/buffer.hpp"
#include "mpe/cache/all.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/embedding/state_rows.hpp"
#include "mpe/detail/kernels/all.hpp"
#include "mpe/io/checkpoint_format.hpp"
#include "mpe/optim/all.hpp"
#include "mpe/optim/state_precision.hpp"
#include "mpe/storage/all.hpp"

// The writer, the checks and the reader (bodies of this header; they include nothing of mpe).
// clang-format off
#include "mpe/detail/io/checkpoint_writer.inl"
#include "mpe/detail/io/checkpoint_verify.inl"
#include "mpe/detail/io/checkpoint_reader.inl"
// clang-format on

namespace mpe::io {

/// Writes `e`'s exact state (CachedEmbedding::state()) to `path` atomically: a temporary
/// file beside it, fsync, rename over `path`, fsync of the directory. `e`: a CachedEmbedding
/// of any policies and backend. Waits for `e`'s queued work. Throws std::system_error (a
/// std::runtime_error) naming the path on any I/O failure, and (EINVAL, before writing) for
/// an empty `path` or one that exists and is not a regular file (a symbolic link, directory,
/// FIFO or device: rename would replace the link or node itself); the temporary file is
/// removed and a previous file at `path` is untouched. Format: docs/checkpoint_format.md.
template <class Embedding>
void save(const Embedding& e, const std::filesystem::path& path) {
  ::mpe::detail::ckpt::save_file(e, path);
}

/// Reads the whole file at `path`, verifies all of it (magic, version, policies, shapes,
/// CRC-32C checksums, values) and only then replaces `e`'s state
/// (CachedEmbedding::restore_state()). A pending deferred validation error of `e` is thrown
/// first (nothing loaded; synchronize()). Throws mpe::checkpoint_error naming the path and
/// the first fault, or std::invalid_argument naming both precisions when the file's
/// optimizer-state precision is not the object's; `e` is then unchanged.
template <class Embedding>
void load(Embedding& e, const std::filesystem::path& path) {
  e.synchronize();
  const std::string prefix = "mpe::CachedEmbedding::load: '" + path.string() + "': ";
  const std::vector<std::uint8_t> bytes = ::mpe::detail::ckpt::read_file(path, prefix);
  ::mpe::detail::ckpt::load_bytes(e, bytes.data(), bytes.size(), path.string());
}

/// A checkpoint in host memory: exactly the bytes save() writes to a file (format MPECKPT1,
/// docs/checkpoint_format.md), for callers that keep state in their own containers (a
/// PyTorch state_dict, an object store). Waits for `e`'s queued work. `e`: a CachedEmbedding
/// of any policies and backend. Throws what the reads of backend memory throw; never
/// touches the file system.
template <class Embedding>
std::vector<std::uint8_t> save_to_bytes(const Embedding& e) {
  return ::mpe::detail::ckpt::save_bytes(e);
}

/// Replaces `e`'s state with the checkpoint in `bytes` (host memory) after verifying all
/// of it, exactly as load() verifies a file. Throws mpe::checkpoint_error naming `source`
/// and the first fault, std::invalid_argument for a state precision that is not `e`'s, or
/// `e`'s pending deferred validation error; `e` is then unchanged.
template <class Embedding>
void load_from_bytes(Embedding& e, std::span<const std::uint8_t> bytes,
                     const std::string& source = "in-memory checkpoint") {
  e.synchronize();
  ::mpe::detail::ckpt::load_bytes(e, bytes.data(), bytes.size(), source);
}

/// The `Io` of CachedEmbedding::save() / load(): forwards to io::save() / io::load() (the
/// core names this type only, so that it holds no file code).
struct CheckpointFile {
  /// io::save(e, path).
  template <class Embedding>
  static void save(const Embedding& e, const std::filesystem::path& path) {
    ::mpe::io::save(e, path);
  }
  /// io::load(e, path).
  template <class Embedding>
  static void load(Embedding& e, const std::filesystem::path& path) {
    ::mpe::io::load(e, path);
  }
};

}  // namespace mpe::io
