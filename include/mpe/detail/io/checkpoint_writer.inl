// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/io/checkpoint_writer.inl
/// @brief The checkpoint writer behind io::save() and io::save_to_bytes(): header, sections
/// and trailer from a table's TableState (CachedEmbedding::state()), to a file atomically or
/// to memory (included by mpe/io/checkpoint.hpp). The format is documented in
/// mpe/io/checkpoint_format.hpp.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "mpe/detail/io/bytes.hpp"

namespace mpe::detail {

/// What save() is about to do to the file system (argument of checkpoint_io_hook).
enum class CheckpointIoOp { Open, Write, Fsync, Rename, DirFsync };

/// Test-only fault injection: when set, save() calls it before every open, write, fsync
/// and rename of a checkpoint, with the operation and its 0-based index within this
/// save(). An exception it throws propagates out of save() exactly like an I/O error
/// (the temporary file is removed, the previous checkpoint is untouched). Not
/// thread-safe; leave it empty outside tests.
inline std::function<void(CheckpointIoOp, std::size_t)> checkpoint_io_hook;

namespace ckpt {

namespace fmt = ::mpe::io::checkpoint;

/// Writes a file atomically: a temporary file in the target's directory, fsync, rename
/// over the target, fsync of the directory. The destructor removes the temporary file
/// unless commit() finished. The target must be a path that does not exist or names a
/// regular file: an empty path, or one naming a symbolic link, directory, FIFO, socket or
/// device, is refused before anything is written (rename() would replace the link or the
/// device node itself, not what it points to).
class AtomicWriter {
 public:
  explicit AtomicWriter(const std::filesystem::path& target) : target_(target) {
    if (target.empty()) {
      errno = EINVAL;
      fail("the path is empty");
    }
    struct stat st {};
    if (::lstat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      errno = EINVAL;
      fail(std::string("exists and is ") + kind_of(st.st_mode) +
           ", not a regular file; save() replaces only regular files (pass the file's own path)");
    }
    static std::atomic<unsigned long long> counter{0};
    dir_ = target.parent_path();
    tmp_ = target;
    tmp_ += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    hook(CheckpointIoOp::Open);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create temporary file '" + tmp_.string() + "'");
  }
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  ~AtomicWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  void write(const void* p, std::size_t n) {
    crc_ = fmt::crc32c(p, n, crc_);
    bytes_ += n;
    const auto* b = static_cast<const std::uint8_t*>(p);
    while (n > 0) {
      hook(CheckpointIoOp::Write);
      const std::size_t chunk = n < (std::size_t{1} << 30) ? n : (std::size_t{1} << 30);
      const ::ssize_t w = ::write(fd_, b, chunk);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("cannot write '" + tmp_.string() + "'");
      }
      b += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  std::uint32_t crc() const { return crc_; }
  std::uint64_t bytes() const { return bytes_; }

  void commit() {
    hook(CheckpointIoOp::Fsync);
    if (::fsync(fd_) != 0) fail("cannot fsync '" + tmp_.string() + "'");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close '" + tmp_.string() + "'");
    hook(CheckpointIoOp::Rename);
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
      fail("cannot rename '" + tmp_.string() + "' to '" + target_.string() + "'");
    }
    committed_ = true;
    // The new file is in place; a failing directory fsync only weakens durability, but
    // the caller still hears about it.
    hook(CheckpointIoOp::DirFsync);
    const std::string dir = dir_.empty() ? std::string(".") : dir_.string();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail("cannot open directory '" + dir + "' to fsync it");
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    if (rc != 0) {
      errno = err;
      fail("cannot fsync directory '" + dir + "'");
    }
  }

 private:
  static const char* kind_of(mode_t m) {
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    return "a special file";
  }
  void hook(CheckpointIoOp op) {
    if (checkpoint_io_hook) checkpoint_io_hook(op, ops_);
    ++ops_;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::system_error(errno, std::generic_category(),
                            "mpe::CachedEmbedding::save: '" + target_.string() + "': " + what);
  }
  std::filesystem::path target_, dir_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  std::uint32_t crc_ = 0;
  std::uint64_t bytes_ = 0;
  std::size_t ops_ = 0;
};

/// The in-memory sink of a checkpoint (same interface as AtomicWriter, no commit step).
class MemoryWriter {
 public:
  void write(const void* p, std::size_t n) {
    crc_ = fmt::crc32c(p, n, crc_);
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::uint32_t crc() const { return crc_; }
  std::uint64_t bytes() const { return bytes_.size(); }
  std::vector<std::uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<std::uint8_t> bytes_;
  std::uint32_t crc_ = 0;
};

inline void stats_to_array(const CacheStats& s, std::uint64_t* a) {
  const std::uint64_t v[fmt::kNumStats] = {s.lookups,      s.unique_rows,        s.hits,
                                           s.misses,       s.conflict_misses,    s.evictions,
                                           s.writebacks,   s.lfu_rejections,     s.saturated_rows,
                                           s.bytes_filled, s.bytes_written_back, s.skipped_steps};
  std::memcpy(a, v, sizeof v);
}

/// The header (magic to header checksum) of the checkpoint of `e`, whose state is `s`
/// (e.state()).
template <class E, class State>
Bytes header(const E& e, const State& s) {
  using S = typename E::storage_type;
  using C = typename E::cache_policy;
  using R = typename E::rounding_type;
  const EmbeddingConfig& config = e.config();
  Bytes b;
  b.raw(fmt::kMagic, 8);
  b.put(fmt::kVersion);
  b.put(std::uint32_t{0});  // header_bytes, patched below
  b.str(S::name);
  b.str(C::name);
  b.put(static_cast<std::uint32_t>(C::ways));
  b.str(R::name);
  b.put(static_cast<std::uint32_t>(config.table_rows.size()));
  for (auto r : config.table_rows) b.put(static_cast<std::int64_t>(r));
  b.put(static_cast<std::int32_t>(config.dim));
  b.put(static_cast<std::int32_t>(config.row_alignment));
  b.put(static_cast<std::uint64_t>(e.state_row_bytes()));
  b.put(static_cast<std::int64_t>(e.num_sets()));
  b.put(static_cast<std::int64_t>(e.cache_slots()));
  b.put(static_cast<std::int64_t>(C::meta_words(e.cache_slots())));  // policy_words
  b.put(static_cast<std::uint64_t>(s.seed));
  b.put(static_cast<std::uint64_t>(s.step));
  // defer_admission: a forward() whose admission is pending is not counted (neither its
  // populate number nor its call): state() leaves it out, so the checkpoint is the state
  // before it.
  b.put(static_cast<std::uint64_t>(s.populate_counter));
  b.put(static_cast<std::uint64_t>(s.decay_clock));
  b.str(s.optimizer);
  b.put(static_cast<std::uint32_t>(s.state_values_per_row));
  b.str(E::state_precision::name);
  b.put(fmt::kNumStats);
  std::uint64_t st[fmt::kNumStats];
  stats_to_array(s.stats, st);
  for (auto x : st) b.put(x);
  // The calls: all made so far but that forward() (a resumed run repeats it), calls refused
  // after it included (a backward() of a wrong gradient size counts, as in the run that
  // goes on).
  b.put(static_cast<std::uint64_t>(s.calls));  // calls (version 4)
  b.put(fmt::kNumSections);
  const auto H = static_cast<std::uint32_t>(b.v.size() + 4);
  std::memcpy(b.v.data() + 12, &H, 4);
  b.put(fmt::crc32c(b.v.data(), b.v.size()));
  return b;
}

/// Payload of the `pending_batch` section (host bytes): `i64 n, i64 B, i64 indices[n],
/// i64 offsets[T*B + 1]` of the pending prefetch of `s`, or empty.
template <class E, class State>
std::vector<std::uint8_t> pending_batch(const E& e, const State& s) {
  if (s.pending_offsets.empty()) return {};
  const std::size_t n = s.pending_indices.size();
  const std::size_t m = s.pending_offsets.size();
  std::vector<std::uint8_t> v(16 + 8 * (n + m));
  const std::int64_t head[2] = {
      static_cast<std::int64_t>(n),
      static_cast<std::int64_t>((m - 1) / static_cast<std::size_t>(e.num_tables()))};
  std::memcpy(v.data(), head, 16);
  if (n > 0) e.backend().copy_to_host(v.data() + 16, s.pending_indices.data(), 8 * n);
  e.backend().copy_to_host(v.data() + 16 + 8 * n, s.pending_offsets.data(), 8 * m);
  return v;
}

/// One section's bytes in the table's backend memory.
struct Section {
  const void* data;
  std::size_t bytes;
};

/// Writes the checkpoint of `e` (header `head`, sections of `s`, trailer) to `w` (an
/// AtomicWriter or a MemoryWriter).
template <class E, class State, class Writer>
void write_checkpoint(const E& e, const State& s, const Bytes& head, Writer& w) {
  using Backend = typename E::backend_type;
  const std::vector<std::uint8_t> pending = pending_batch(e, s);
  const Section sec[fmt::kNumSections] = {
      {s.store.data(), static_cast<std::size_t>(e.total_rows()) * e.state_row_bytes()},
      {s.cache_rows.data(), s.cache_rows.size_bytes()},
      {s.tags.data(), s.tags.size_bytes()},
      {s.last_use.data(), s.last_use.size_bytes()},
      {s.dirty.data(), s.dirty.size_bytes()},
      {s.policy_words.data(), s.policy_words.size_bytes()},
      {s.optimizer_state.data(), s.optimizer_state.size_bytes()},
      {pending.data(), pending.size()},
      {s.cached_optimizer_state.data(), s.cached_optimizer_state.size_bytes()}};
  w.write(head.v.data(), head.v.size());
  std::vector<std::uint8_t> staging;
  for (std::uint32_t i = 0; i < fmt::kNumSections; ++i) {
    Bytes h;
    h.str(i == fmt::kPolicySection ? std::string(E::cache_policy::name) : std::string(fmt::kSectionNames[i]));
    h.put(static_cast<std::uint64_t>(sec[i].bytes));
    w.write(h.v.data(), h.v.size());
    std::uint32_t crc = 0;
    if (i == 0 && s.store_holds_slot_index) {  // the rows without their slot index entries
      const auto rows = static_cast<std::size_t>(e.total_rows());
      const std::size_t per = std::max<std::size_t>(1, (std::size_t{4} << 20) / s.store_stride);
      for (std::size_t r0 = 0; r0 < rows; r0 += per) {
        e.read_store_rows(static_cast<std::int64_t>(r0), std::min(per, rows - r0), staging);
        w.write(staging.data(), staging.size());
        crc = fmt::crc32c(staging.data(), staging.size(), crc);
      }
    } else if (!Backend::device_spans || i == fmt::kNumBufferSections) {  // host memory
      w.write(sec[i].data, sec[i].bytes);
      crc = fmt::crc32c(sec[i].data, sec[i].bytes);
    } else {
      constexpr std::size_t kChunk = std::size_t{4} << 20;
      staging.resize(std::min(kChunk, sec[i].bytes));
      for (std::size_t off = 0; off < sec[i].bytes; off += kChunk) {
        const std::size_t n = std::min(kChunk, sec[i].bytes - off);
        e.backend().copy_to_host(staging.data(), static_cast<const std::uint8_t*>(sec[i].data) + off, n);
        w.write(staging.data(), n);
        crc = fmt::crc32c(staging.data(), n, crc);
      }
    }
    w.write(&crc, 4);
  }
  Bytes t;
  t.raw(fmt::kEndMagic, 8);
  t.put(static_cast<std::uint64_t>(w.bytes() + fmt::kTrailerBytes));
  w.write(t.v.data(), t.v.size());
  const std::uint32_t file_crc = w.crc();
  w.write(&file_crc, 4);
}

/// Writes the checkpoint of `e` to `path` atomically (AtomicWriter). Waits for e's work.
template <class E>
void save_file(const E& e, const std::filesystem::path& path) {
  const auto s = e.state();
  const Bytes head = header(e, s);
  AtomicWriter w(path);
  write_checkpoint(e, s, head, w);
  w.commit();
}

/// The bytes save_file() writes, in host memory. Waits for e's work.
template <class E>
std::vector<std::uint8_t> save_bytes(const E& e) {
  const auto s = e.state();
  const Bytes head = header(e, s);
  MemoryWriter w;
  write_checkpoint(e, s, head, w);
  return w.take();
}

}  // namespace ckpt

}  // namespace mpe::detail
