// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/io/checkpoint.inl
/// @brief The checkpoint writer and verifying reader behind CachedEmbedding::save() / load()
/// (included by mpe/io/checkpoint.hpp). The format is documented in
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
#include <iterator>
#include <string>
#include <system_error>
#include <vector>


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

/// Little-endian byte sink (the header).
struct Bytes {
  std::vector<std::uint8_t> v;
  void raw(const void* p, std::size_t n) {
    if (n == 0) return;
    const std::size_t at = v.size();
    v.resize(at + n);
    std::memcpy(v.data() + at, p, n);
  }
  template <class T>
  void put(T x) {
    raw(&x, sizeof x);  // little-endian host (static_assert in checkpoint_format.hpp)
  }
  void str(const std::string& s) {
    put(static_cast<std::uint16_t>(s.size()));
    raw(s.data(), s.size());
  }
};

/// Bounds-checked reader over the file bytes; every failure names the byte offset.
struct Cursor {
  const std::uint8_t* data;
  std::size_t end;  // readable limit
  std::size_t pos;
  std::size_t file_size;
  const std::string& prefix;

  [[noreturn]] void fail(const std::string& what) const { throw checkpoint_error(prefix + what); }
  const std::uint8_t* take(std::size_t n, const char* field) {
    if (n > end - pos) {
      if (end == file_size) {
        fail("truncated at byte " + std::to_string(file_size) + ": " + field + " needs " + std::to_string(n) +
             " bytes at byte " + std::to_string(pos));
      }
      fail(std::string(field) + " at byte " + std::to_string(pos) + " runs past the end of the header");
    }
    const std::uint8_t* p = data + pos;
    pos += n;
    return p;
  }
  template <class T>
  T get(const char* field) {
    T x;
    std::memcpy(&x, take(sizeof x, field), sizeof x);
    return x;
  }
  std::string str(const char* field) {
    const auto n = get<std::uint16_t>(field);
    if (n > fmt::kMaxNameBytes) {
      fail(std::string(field) + " length " + std::to_string(n) + " at byte " + std::to_string(pos - 2) +
           " exceeds " + std::to_string(fmt::kMaxNameBytes));
    }
    const auto* p = take(n, field);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
};

inline std::string hex32(std::uint32_t x) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 7; i >= 0; --i) s += d[(x >> (4 * i)) & 0xf];
  return s;
}

/// Writes a file atomically: a temporary file in the target's directory, fsync, rename
/// over the target, fsync of the directory. The destructor removes the temporary file
/// unless commit() finished.
class AtomicWriter {
 public:
  explicit AtomicWriter(const std::filesystem::path& target) : target_(target) {
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

/// Reads a whole file into memory; failures throw checkpoint_error naming the path.
inline std::vector<std::uint8_t> read_file(const std::filesystem::path& path, const std::string& prefix) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw checkpoint_error(prefix + "cannot open: " + std::strerror(errno));
  struct FdGuard {
    int fd;
    ~FdGuard() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw checkpoint_error(prefix + "cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw checkpoint_error(prefix + "not a regular file");
  std::vector<std::uint8_t> data(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < data.size()) {
    const ::ssize_t r = ::read(fd, data.data() + got, data.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw checkpoint_error(prefix + "cannot read: " + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  if (got != data.size()) {
    throw checkpoint_error(prefix + "file shrank while reading: " + std::to_string(got) + " of " +
                           std::to_string(data.size()) + " bytes");
  }
  return data;
}

inline void stats_to_array(const CacheStats& s, std::uint64_t* a) {
  const std::uint64_t v[fmt::kNumStats] = {s.lookups,      s.unique_rows,        s.hits,
                                           s.misses,       s.conflict_misses,    s.evictions,
                                           s.writebacks,   s.lfu_rejections,     s.saturated_rows,
                                           s.bytes_filled, s.bytes_written_back, s.skipped_steps};
  std::memcpy(a, v, sizeof v);
}
inline CacheStats stats_from_array(const std::uint64_t* a) {
  CacheStats s;
  std::uint64_t* f[fmt::kNumStats] = {&s.lookups,      &s.unique_rows,        &s.hits,
                                      &s.misses,       &s.conflict_misses,    &s.evictions,
                                      &s.writebacks,   &s.lfu_rejections,     &s.saturated_rows,
                                      &s.bytes_filled, &s.bytes_written_back, &s.skipped_steps};
  for (std::uint32_t i = 0; i < fmt::kNumStats; ++i) *f[i] = a[i];
  return s;
}

}  // namespace ckpt

/// Single item: *p += v.
struct AddCount {
  std::uint64_t* p;
  std::uint64_t v;
  MPE_HOST_DEVICE void operator()(index_t) const { *p += v; }
};

/// Friend of CachedEmbedding: the checkpoint writer and reader, and the store access
/// that the FBGEMM/TorchRec importers and exporters (mpe/io/fbgemm.hpp) need.
struct CheckpointAccess {
  /// One section in backend memory.
  struct Section {
    const void* data;
    std::size_t bytes;
  };

  template <class E>
  static ckpt::Bytes header(const E& e) {
    namespace fmt = io::checkpoint;
    using S = typename E::storage_type;
    using C = typename E::cache_policy;
    using R = typename E::rounding_type;
    ckpt::Bytes b;
    b.raw(fmt::kMagic, 8);
    b.put(fmt::kVersion);
    b.put(std::uint32_t{0});  // header_bytes, patched below
    b.str(S::name);
    b.str(C::name);
    b.put(static_cast<std::uint32_t>(C::ways));
    b.str(R::name);
    b.put(static_cast<std::uint32_t>(e.config_.table_rows.size()));
    for (auto r : e.config_.table_rows) b.put(static_cast<std::int64_t>(r));
    b.put(static_cast<std::int32_t>(e.config_.dim));
    b.put(static_cast<std::int32_t>(e.config_.row_alignment));
    b.put(static_cast<std::uint64_t>(file_stride(e)));
    b.put(static_cast<std::int64_t>(e.num_sets_));
    b.put(static_cast<std::int64_t>(e.cache_slots()));
    b.put(static_cast<std::int64_t>(C::meta_words(e.cache_slots())));  // policy_words
    b.put(static_cast<std::uint64_t>(e.config_.seed));
    const Counters counters = e.read_counters();
    b.put(static_cast<std::uint64_t>(counters.step));
    // defer_admission: a forward() whose admission is pending is not counted (neither its
    // populate number nor its call), so the checkpoint is the state before it.
    const bool unadmitted = e.current_.admission_owed();
    b.put(static_cast<std::uint64_t>(unadmitted ? e.current_.id - 1 : e.populate_counter_));
    b.put(static_cast<std::uint64_t>(counters.decay_clock));
    b.str(e.opt_name_);
    b.put(static_cast<std::uint32_t>(e.state_floats()));
    b.str(E::state_precision::name);
    b.put(fmt::kNumStats);
    std::uint64_t st[fmt::kNumStats];
    ckpt::stats_to_array(counters.stats, st);
    for (auto x : st) b.put(x);
    // The calls: all made so far but that forward() (a resumed run repeats it), calls refused
    // after it included (a backward() of a wrong gradient size counts, as in the run that
    // goes on).
    b.put(static_cast<std::uint64_t>(unadmitted ? e.call_seq_ - 1 : e.call_seq_));  // calls (version 4)
    b.put(fmt::kNumSections);
    const auto H = static_cast<std::uint32_t>(b.v.size() + 4);
    std::memcpy(b.v.data() + 12, &H, 4);
    b.put(fmt::crc32c(b.v.data(), b.v.size()));
    return b;
  }

  /// The `optimizer_cache` section: FP32 state of the cached rows (slots, S), in backend
  /// memory; empty for StateFp32, without a cache, or before the first applied step.
  template <class E>
  static Section optimizer_cache(const E& e) {
    return {e.cache_state_.data(), e.cache_state_.bytes()};
  }

  /// Bytes of a store row in a checkpoint: row_bytes<S>(dim, row_alignment), the store's
  /// stride without the slot index entry that slot_index_in_rows adds (the file's rows are
  /// each store row's first file_stride() bytes, those after the row's data zero).
  template <class E>
  static std::size_t file_stride(const E& e) {
    return row_bytes<typename E::storage_type>(e.config_.dim, e.config_.row_alignment);
  }

  /// Whether the store's rows hold slot index entries (EmbeddingConfig::slot_index_in_rows):
  /// after the row's data, widening the row or in its padding (then the stride is the
  /// file's, but the bytes are not).
  template <class E>
  static bool entries_in_rows(const E& e) {
    return e.slot_offset_ > 0;
  }

  /// Store rows [first, first + count) as checkpoints and exports hold them, into `out`
  /// (resized to (count, file_stride(e)) bytes, host memory): each row's data followed by
  /// zeros, without its slot index entry. Synchronizes (a copy from backend memory).
  template <class E>
  static void read_file_rows(const E& e, index_t first, std::size_t count, std::vector<std::uint8_t>& out) {
    const std::size_t stride = e.stride_, fs = file_stride(e);
    const std::size_t data = E::storage_type::data_bytes(e.config_.dim);
    out.resize(count * stride);
    const std::uint8_t* src = e.store_.data() + static_cast<std::size_t>(first) * stride;
    e.backend_.copy_to_host(out.data(), src, out.size());
    if (!entries_in_rows(e)) return;  // the store's rows are the file's
    // In place: row r moves down to r * fs.
    for (std::size_t r = 0; r < count; ++r) {
      std::memmove(out.data() + r * fs, out.data() + r * stride, data);
      std::memset(out.data() + r * fs + data, 0, fs - data);
    }
    out.resize(count * fs);
  }

  /// Replaces store rows [first, first + count) with `rows` ((count, file_stride(e)) bytes,
  /// host memory). Where the slot index lives in the rows, each row's entry becomes -1 (not
  /// cached): the caller drops the rows' cache lines (import_table) or reindexes the slots
  /// (load). A pending admission (defer_admission) is settled first, from the rows as they
  /// were (CachedEmbedding::admit_pending). Synchronizes.
  template <class E>
  static void write_file_rows(E& e, index_t first, std::size_t count, const std::uint8_t* rows) {
    e.admit_pending();  // settled before the rows change (import_table, load), as write_rows() does
    const std::size_t stride = e.stride_, fs = file_stride(e);
    std::uint8_t* dst = e.store_.data() + static_cast<std::size_t>(first) * stride;
    if (!entries_in_rows(e)) {
      e.backend_.copy_from_host(dst, rows, count * stride);
      return;
    }
    const std::int32_t empty = -1;
    const std::size_t per = std::max<std::size_t>(1, (std::size_t{4} << 20) / stride);
    std::vector<std::uint8_t> staging(std::min(per, count) * stride);
    for (std::size_t r0 = 0; r0 < count; r0 += per) {
      const std::size_t k = std::min(per, count - r0);
      for (std::size_t r = 0; r < k; ++r) {
        std::uint8_t* row = staging.data() + r * stride;
        std::memcpy(row, rows + (r0 + r) * fs, fs);
        std::memset(row + fs, 0, stride - fs);
        std::memcpy(row + e.slot_offset_, &empty, 4);
      }
      e.backend_.copy_from_host(dst + r0 * stride, staging.data(), k * stride);
    }
  }

  template <class E>
  static void sections(const E& e, Section (&s)[io::checkpoint::kNumBufferSections]) {
    // The store as the file holds it: (rows, file_stride) bytes (write() and load_bytes()
    // go row by row where the store's rows hold slot index entries).
    s[0] = {e.store_.data(), static_cast<std::size_t>(e.total_rows_) * file_stride(e)};
    s[1] = {e.cache_rows_.data(), e.cache_rows_.bytes()};
    s[2] = {e.tags_.data(), e.tags_.bytes()};
    s[3] = {e.last_use_.data(), e.last_use_.bytes()};
    s[4] = {e.dirty_.data(), e.dirty_.bytes()};
    s[io::checkpoint::kPolicySection] = {e.meta_.data(), e.meta_.bytes()};
    s[6] = {e.opt_state_.data(), e.opt_state_.bytes()};
  }

  /// Payload of the `pending_batch` section (host bytes): `i64 n, i64 B, i64 indices[n],
  /// i64 offsets[T*B + 1]` of a valid pending prefetch, or empty. Synchronizes.
  template <class E>
  static std::vector<std::uint8_t> pending_batch(const E& e) {
    const auto& p = e.pending_;
    if (!p.valid || e.read_scalar(p.flags.data() + kFlagOk) == 0) return {};
    const auto n = static_cast<std::size_t>(p.n);
    const std::size_t m = static_cast<std::size_t>(p.B * e.num_tables()) + 1;
    std::vector<std::uint8_t> v(16 + 8 * (n + m));
    const std::int64_t head[2] = {p.n, p.B};
    std::memcpy(v.data(), head, 16);
    e.backend_.copy_to_host(v.data() + 16, p.indices_copy.data(), 8 * n);
    e.backend_.copy_to_host(v.data() + 16 + 8 * n, p.offsets_copy.data(), 8 * m);
    return v;
  }

  /// Writes the file to `path` atomically (ckpt::AtomicWriter).
  template <class E>
  static void save(const E& e, const std::filesystem::path& path) {
    const ckpt::Bytes head = header(e);
    ckpt::AtomicWriter w(path);
    write(e, head, w);
    w.commit();
  }

  /// The same bytes as save() writes, in host memory.
  template <class E>
  static std::vector<std::uint8_t> save_bytes(const E& e) {
    const ckpt::Bytes head = header(e);
    ckpt::MemoryWriter w;
    write(e, head, w);
    return w.take();
  }

  /// Writes header, sections and trailer to `w` (an AtomicWriter or a MemoryWriter).
  template <class E, class Writer>
  static void write(const E& e, const ckpt::Bytes& head, Writer& w) {
    namespace fmt = io::checkpoint;
    using Backend = typename E::backend_type;
    Section buffers[fmt::kNumBufferSections];
    sections(e, buffers);
    Section sec[fmt::kNumSections];
    std::copy(std::begin(buffers), std::end(buffers), sec);
    const std::vector<std::uint8_t> pending = pending_batch(e);
    sec[fmt::kNumBufferSections] = {pending.data(), pending.size()};
    sec[fmt::kOptimizerCacheSection] = optimizer_cache(e);
    w.write(head.v.data(), head.v.size());
    std::vector<std::uint8_t> staging;
    for (std::uint32_t i = 0; i < fmt::kNumSections; ++i) {
      ckpt::Bytes h;
      h.str(i == fmt::kPolicySection ? std::string(E::cache_policy::name)
                                     : std::string(fmt::kSectionNames[i]));
      h.put(static_cast<std::uint64_t>(sec[i].bytes));
      w.write(h.v.data(), h.v.size());
      std::uint32_t crc = 0;
      if (i == 0 && entries_in_rows(e)) {  // the rows without their slot index entries
        const auto rows = static_cast<std::size_t>(e.total_rows_);
        const std::size_t per = std::max<std::size_t>(1, (std::size_t{4} << 20) / e.stride_);
        for (std::size_t r0 = 0; r0 < rows; r0 += per) {
          read_file_rows(e, static_cast<index_t>(r0), std::min(per, rows - r0), staging);
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
          e.backend_.copy_to_host(staging.data(), static_cast<const std::uint8_t*>(sec[i].data) + off, n);
          w.write(staging.data(), n);
          crc = fmt::crc32c(staging.data(), n, crc);
        }
      }
      w.write(&crc, 4);
    }
    ckpt::Bytes t;
    t.raw(fmt::kEndMagic, 8);
    t.put(static_cast<std::uint64_t>(w.bytes() + fmt::kTrailerBytes));
    w.write(t.v.data(), t.v.size());
    const std::uint32_t file_crc = w.crc();
    w.write(&file_crc, 4);
  }

  /// Verifies `data` (a whole checkpoint) against `e`'s configuration and, only if all of
  /// it is valid, replaces e's state with it. `source` names the file in messages.
  template <class E>
  static void load_bytes(E& e, const std::uint8_t* data, std::size_t n, const std::string& source) {
    namespace fmt = io::checkpoint;
    using S = typename E::storage_type;
    using C = typename E::cache_policy;
    using R = typename E::rounding_type;
    using P = typename E::state_precision;
    const std::string prefix = "mpe::CachedEmbedding::load: '" + source + "': ";
    ckpt::Cursor c{data, n, 0, n, prefix};
    auto mismatch = [&](const std::string& what, const std::string& file, const std::string& here) {
      c.fail(what + " " + file + " in file, " + here + " here");
    };
    // ---- fixed prefix ----
    const auto* magic = c.take(8, "magic");
    if (std::memcmp(magic, fmt::kMagic, 8) != 0) c.fail("not an mpe checkpoint (bad magic)");
    const auto version = c.get<std::uint32_t>("version");
    if (version < fmt::kMinVersion || version > fmt::kVersion) {
      c.fail("format version " + std::to_string(version) + " in file; this build reads versions " +
             std::to_string(fmt::kMinVersion) + " to " + std::to_string(fmt::kVersion));
    }
    const std::uint32_t n_sections = fmt::sections_of_version(version);
    const auto H = c.get<std::uint32_t>("header_bytes");
    if (H < 24 || H > (1u << 24)) c.fail("header_bytes = " + std::to_string(H) + " is implausible");
    if (H > n) c.fail("truncated at byte " + std::to_string(n) + ": the header needs " + std::to_string(H));
    std::uint32_t stored_crc;
    std::memcpy(&stored_crc, data + H - 4, 4);
    if (const std::uint32_t crc = fmt::crc32c(data, H - 4); crc != stored_crc) {
      c.fail("header checksum mismatch (stored " + ckpt::hex32(stored_crc) + ", computed " +
             ckpt::hex32(crc) + ")");
    }
    // ---- header fields (inside the checksummed header) ----
    c.end = H - 4;
    auto quote = [](const std::string& s) { return "'" + s + "'"; };
    if (auto s = c.str("storage"); s != S::name) mismatch("storage", quote(s), quote(S::name));
    if (auto s = c.str("cache_policy"); s != C::name) mismatch("cache policy", quote(s), quote(C::name));
    if (auto w = c.get<std::uint32_t>("ways"); w != static_cast<std::uint32_t>(C::ways)) {
      mismatch("ways", std::to_string(w), std::to_string(C::ways));
    }
    if (auto s = c.str("rounding"); s != R::name) mismatch("rounding", quote(s), quote(R::name));
    const auto T = c.get<std::uint32_t>("T");
    if (T != e.config_.table_rows.size()) {
      mismatch("table count", std::to_string(T), std::to_string(e.config_.table_rows.size()));
    }
    for (std::uint32_t t = 0; t < T; ++t) {
      const auto r = c.get<std::int64_t>("table_rows");
      if (r != e.config_.table_rows[t]) {
        mismatch("table_rows[" + std::to_string(t) + "] =", std::to_string(r),
                 std::to_string(e.config_.table_rows[t]));
      }
    }
    auto expect_eq = [&](const char* field, auto file, auto here) {
      if (file != here) mismatch(field, std::to_string(file), std::to_string(here));
    };
    expect_eq("dim", c.get<std::int32_t>("dim"), e.config_.dim);
    expect_eq("row_alignment", c.get<std::int32_t>("row_alignment"), e.config_.row_alignment);
    expect_eq("store_row_bytes", c.get<std::uint64_t>("store_row_bytes"),
              static_cast<std::uint64_t>(file_stride(e)));
    expect_eq("num_sets", c.get<std::int64_t>("num_sets"), static_cast<std::int64_t>(e.num_sets_));
    expect_eq("cache_slots", c.get<std::int64_t>("cache_slots"), static_cast<std::int64_t>(e.cache_slots()));
    // From version 3: the policy's metadata words; versions 1 and 2: the LFU sketch width (the
    // only metadata those versions had: 4 lines of that width; 0 for the other policies).
    const std::int64_t policy_words = C::meta_words(e.cache_slots());
    if (version >= 3) {
      expect_eq("policy_words", c.get<std::int64_t>("policy_words"), policy_words);
    } else {
      expect_eq("sketch_width", c.get<std::int64_t>("sketch_width"), policy_words / SketchRef::depth);
    }
    const auto seed = c.get<std::uint64_t>("seed");
    const auto step = c.get<std::uint64_t>("step");
    // The next backward() counts step + 1 (Adam's bias correction is 1-based): a step
    // with no successor cannot be continued from.
    if (step == ~std::uint64_t{0}) {
      c.fail("step = " + std::to_string(step) +
             " cannot be continued (the next backward() would wrap the step to 0)");
    }
    const auto populate_counter = c.get<std::uint64_t>("populate_counter");
    const auto decay_clock = c.get<std::uint64_t>(version >= 3 ? "decay_clock" : "sketch_increments");
    // Version 2 names the optimizer; version 1 numbered it (1 sgd, 2 rowwise_adagrad).
    std::string opt_name;
    if (version == 1) {
      const auto kind = c.get<std::uint32_t>("optimizer_kind");
      if (kind > 2) c.fail("optimizer_kind = " + std::to_string(kind) + " is not a version-1 optimizer kind");
      opt_name = kind == 0 ? "" : kind == 1 ? "sgd" : "rowwise_adagrad";
    } else {
      opt_name = c.str("optimizer");
    }
    const auto state_floats = c.get<std::uint32_t>("optimizer_state_floats");
    // The optimizer must be one this build knows, with its state size for this D.
    std::int64_t known_state_floats = 0;
    if (!opt_name.empty() && !KnownOptimizers::visit(opt_name, [&]<class Opt>() {
          known_state_floats = OptimizerRule<Opt>::state_floats(e.config_.dim);
        })) {
      c.fail("optimizer " + quote(opt_name) + " is not an optimizer this build knows");
    }
    if (static_cast<std::int64_t>(state_floats) != known_state_floats) {
      c.fail("optimizer_state_floats = " + std::to_string(state_floats) + " is invalid for optimizer " +
             quote(opt_name.empty() ? "none" : opt_name) + " (" + std::to_string(known_state_floats) +
             " at dim " + std::to_string(e.config_.dim) + ")");
    }
    // The state's precision (from version 3; versions 1 and 2 hold FP32 state): a mismatch is a
    // usage error, not a bad file.
    const std::string precision = version >= 3 ? c.str("state_precision") : std::string("fp32");
    if (precision != P::name) {
      throw std::invalid_argument(prefix + "optimizer state precision " + quote(precision) + " in file, " +
                                  quote(P::name) +
                                  " here (the object's StatePrecision); load it into a CachedEmbedding "
                                  "of the file's precision");
    }
    const auto n_stats = c.get<std::uint32_t>("n_stats");
    if (n_stats > fmt::kNumStats) {
      c.fail("n_stats = " + std::to_string(n_stats) + "; this build knows " + std::to_string(fmt::kNumStats));
    }
    std::uint64_t st[fmt::kNumStats] = {};
    for (std::uint32_t i = 0; i < n_stats; ++i) st[i] = c.get<std::uint64_t>("stats");
    // The call counter that numbers deferred errors (version 4): the next call is number
    // calls + 1, an i64.
    constexpr std::uint64_t kMaxCalls = static_cast<std::uint64_t>(INT64_MAX) - 1;
    std::uint64_t calls = 0;
    if (version >= 4) {
      calls = c.get<std::uint64_t>("calls");
      if (calls < populate_counter) {
        c.fail("calls = " + std::to_string(calls) + " is below populate_counter = " +
               std::to_string(populate_counter) + " (every populate is one prefetch() or forward() call)");
      }
      if (calls > kMaxCalls) {
        c.fail("calls = " + std::to_string(calls) +
               " cannot be continued (the next call's number would not fit in an i64)");
      }
    } else {
      // Versions 1 to 3 do not count the calls; they imply populate_counter + step (every
      // populate was one prefetch() or forward() call, every completed step one backward()
      // call), held at most kMaxCalls so that every such file loads as it always did.
      calls = std::min(populate_counter, kMaxCalls);
      calls += std::min(step, kMaxCalls - calls);
    }
    expect_eq("n_sections", c.get<std::uint32_t>("n_sections"), n_sections);
    if (c.pos != c.end) c.fail(std::to_string(c.end - c.pos) + " unexpected bytes at the end of the header");
    // ---- sections ----
    c.end = n;
    c.pos = H;
    Section here[fmt::kNumBufferSections];
    sections(e, here);
    const auto rows = static_cast<std::uint64_t>(e.total_rows_);
    if (state_floats > 0 && rows > UINT64_MAX / (P::value_bytes * state_floats)) {
      c.fail("optimizer state size overflows");
    }
    const std::uint64_t opt_bytes = rows * state_floats * P::value_bytes;
    // FP32 state of the cached rows (compact precisions with a cache, once the state exists)
    const std::uint64_t opt_cache_bytes =
        P::cached ? static_cast<std::uint64_t>(e.cache_slots()) * state_floats * 4u : 0u;
    const std::uint8_t* payload[fmt::kNumSections] = {};
    std::uint64_t pending_len = 0;
    for (std::uint32_t i = 0; i < n_sections; ++i) {
      const std::string want = i == fmt::kPolicySection ? fmt::policy_section_name(version, C::name)
                                                        : std::string(fmt::kSectionNames[i]);
      const std::string name = c.str("section name");
      if (name != want) {
        c.fail("section " + std::to_string(i) + " is " + quote(name) + ", expected " + quote(want));
      }
      const auto len = c.get<std::uint64_t>("section length");
      if (i == fmt::kNumBufferSections) {  // pending_batch: empty or a batch (checked below)
        if (len > n)
          c.fail("section " + quote(want) + " is " + std::to_string(len) + " bytes, longer than the file");
        pending_len = len;
      }
      const std::uint64_t expect = i == 6                             ? opt_bytes
                                   : i == fmt::kNumBufferSections     ? len
                                   : i == fmt::kOptimizerCacheSection ? opt_cache_bytes
                                                                      : here[i].bytes;
      if (len != expect) {
        c.fail("section " + quote(want) + " is " + std::to_string(len) + " bytes, expected " +
               std::to_string(expect));
      }
      payload[i] = c.take(static_cast<std::size_t>(len), ("section '" + want + "'").c_str());
      const auto stored = c.get<std::uint32_t>(("section '" + want + "' checksum").c_str());
      if (const std::uint32_t crc = fmt::crc32c(payload[i], static_cast<std::size_t>(len)); crc != stored) {
        c.fail("section " + quote(want) + " checksum mismatch (stored " + ckpt::hex32(stored) +
               ", computed " + ckpt::hex32(crc) + ")");
      }
    }
    // ---- trailer ----
    if (n - c.pos > fmt::kTrailerBytes) {
      c.fail(std::to_string(n - c.pos - fmt::kTrailerBytes) +
             " trailing bytes after the end of the checkpoint");
    }
    if (std::memcmp(c.take(8, "end magic"), fmt::kEndMagic, 8) != 0) c.fail("bad end magic");
    const auto file_bytes = c.get<std::uint64_t>("file_bytes");
    if (file_bytes != n) {
      c.fail("file_bytes = " + std::to_string(file_bytes) + " but the file has " + std::to_string(n) +
             " bytes");
    }
    const std::uint32_t file_crc_here = fmt::crc32c(data, n - 4);
    if (const auto stored = c.get<std::uint32_t>("file checksum"); stored != file_crc_here) {
      c.fail("file checksum mismatch (stored " + ckpt::hex32(stored) + ", computed " +
             ckpt::hex32(file_crc_here) + ")");
    }
    // ---- consistency of the cache metadata (a file with valid checksums may still lie) ----
    const index_t slots = e.cache_slots();
    const index_t W = C::ways;
    for (index_t s = 0; s < slots; ++s) {
      index_t tag;
      std::uint64_t last;
      std::memcpy(&tag, payload[2] + s * 8, 8);
      std::memcpy(&last, payload[3] + s * 8, 8);
      const std::uint8_t dirty = payload[4][s];
      const std::string slot = "slot " + std::to_string(s);
      if (tag < -1 || tag >= e.total_rows_) {
        c.fail("tags: " + slot + " holds row " + std::to_string(tag) + ", outside [-1, " +
               std::to_string(e.total_rows_) + ")");
      }
      if (tag >= 0 && set_of_row(tag, e.num_sets_) != s / W) {
        c.fail("tags: " + slot + " holds row " + std::to_string(tag) + ", which belongs to set " +
               std::to_string(set_of_row(tag, e.num_sets_)));
      }
      if (tag >= 0) {
        for (index_t o = s / W * W; o < s; ++o) {
          index_t other;
          std::memcpy(&other, payload[2] + o * 8, 8);
          if (other == tag) c.fail("tags: row " + std::to_string(tag) + " is held by two slots of one set");
        }
      }
      if (dirty > 1 || (dirty == 1 && tag < 0)) {
        c.fail("dirty: " + slot + " has dirty = " + std::to_string(dirty) + (tag < 0 ? " but is empty" : ""));
      }
      if (last > populate_counter) {
        c.fail("last_use: " + slot + " = " + std::to_string(last) +
               " is after populate_counter = " + std::to_string(populate_counter));
      }
    }
    if (slots > 0) {
      std::vector<std::uint32_t> words(static_cast<std::size_t>(policy_words));
      if (!words.empty()) {  // Lru and DirectMapped keep no words: words.data() may be null
        std::memcpy(words.data(), payload[fmt::kPolicySection], words.size() * 4);
      }
      std::vector<std::int64_t> tags(static_cast<std::size_t>(slots));
      std::memcpy(tags.data(), payload[2], tags.size() * 8);
      if (const std::string why = C::check_meta(words.data(), tags.data(), slots); !why.empty()) {
        c.fail("section " + quote(fmt::policy_section_name(version, C::name)) + ": " + why);
      }
    }
    const std::uint64_t period = std::max<std::uint64_t>(C::decay_period(slots), 1);
    if (decay_clock >= period) {
      c.fail((version >= 3 ? "decay_clock = " : "sketch_increments = ") + std::to_string(decay_clock) +
             " must be below " + std::to_string(period));
    }
    // ---- values: every one must be one the state can hold (checksums alone do not say) ----
    check_values(e, c, payload, opt_name);
    std::vector<std::int64_t> pending_indices, pending_offsets;
    if (pending_len > 0) {
      check_pending(e, c, payload[fmt::kNumBufferSections], pending_len, pending_indices, pending_offsets);
    }
    // ---- commit: allocation first (a failure leaves e unchanged), then copies ----
    using Backend = typename E::backend_type;
    detail::Buffer<std::uint8_t, Backend> opt;
    opt.set_backend(e.backend_);
    opt.set_purpose(MemoryPurpose::Optimizer);
    const bool new_opt = opt_bytes != e.opt_state_.bytes();
    if (new_opt) opt.reset(static_cast<std::size_t>(opt_bytes));
    detail::Buffer<float, Backend> opt_cache;
    opt_cache.set_backend(e.backend_);
    opt_cache.set_purpose(MemoryPurpose::Optimizer);
    const bool new_opt_cache = opt_cache_bytes != e.cache_state_.bytes();
    if (new_opt_cache) opt_cache.reset(static_cast<std::size_t>(opt_cache_bytes / 4));
    void* dst[fmt::kNumBufferSections] = {e.store_.data(),
                                          e.cache_rows_.data(),
                                          e.tags_.data(),
                                          e.last_use_.data(),
                                          e.dirty_.data(),
                                          e.meta_.data(),
                                          new_opt ? static_cast<void*>(opt.data()) : e.opt_state_.data()};
    for (std::uint32_t i = 0; i < fmt::kNumBufferSections; ++i) {
      const std::size_t bytes = i == 6 ? static_cast<std::size_t>(opt_bytes) : here[i].bytes;
      if (i == 0) {  // the file's rows (the slot index entries rewritten by reindex_slots below)
        write_file_rows(e, 0, static_cast<std::size_t>(e.total_rows_), payload[0]);
        continue;
      }
      e.backend_.copy_from_host(dst[i], payload[i], bytes);
    }
    if (new_opt) e.opt_state_.swap(opt);
    e.reindex_slots();
    if (opt_cache_bytes > 0) {
      e.backend_.copy_from_host(new_opt_cache ? opt_cache.data() : e.cache_state_.data(),
                                payload[fmt::kOptimizerCacheSection],
                                static_cast<std::size_t>(opt_cache_bytes));
    }
    if (new_opt_cache) e.cache_state_.swap(opt_cache);
    e.config_.seed = seed;
    Counters counters{};
    counters.stats = ckpt::stats_from_array(st);
    counters.step = step;
    counters.decay_clock = decay_clock;
    e.backend_.copy_from_host(e.counters_.data(), &counters, sizeof counters);
    e.populate_counter_ = populate_counter;
    e.call_seq_ = calls;
    e.opt_name_ = opt_name;
    for (auto* b : {&e.current_, &e.pending_, &e.staging_}) {
      b->valid = false;
      b->awaiting_backward = false;
      b->admission_pending = false;  // dropped with the awaiting batch (defer_admission)
    }
    if (!pending_offsets.empty()) e.restore_pending(pending_indices, pending_offsets);
  }

  /// load(): every store row decodes to finite values within Storage::limit, every
  /// occupied cache row is finite and within it, and every optimizer state value is in its
  /// kind's domain. Throws checkpoint_error naming section, row (or slot) and value.
  template <class E>
  static void check_values(const E& e, ckpt::Cursor& c, const std::uint8_t* const* payload,
                           const std::string& opt_name) {
    using S = typename E::storage_type;
    const std::int32_t D = e.config_.dim;
    const auto holds = [](float x) { return num::is_finite(x) && x <= S::limit && x >= -S::limit; };
    const std::string range =
        std::string(S::name) + " holds finite values within +-" + format_float(S::limit);
    const std::size_t fs = file_stride(e), data = S::data_bytes(D);
    for (index_t r = 0; r < e.total_rows_; ++r) {
      const std::uint8_t* row = payload[0] + static_cast<std::size_t>(r) * fs;
      // A row's padding is zeros (every store writes its data bytes only; save() writes no
      // slot index entry): anything else is not a checkpoint of this layout.
      for (std::size_t k = data; k < fs; ++k) {
        if (row[k] != 0) {
          c.fail("section 'store': row " + std::to_string(r) + " padding byte " + std::to_string(k) + " = " +
                 std::to_string(row[k]) + "; the " + std::to_string(fs - data) + " bytes after a row's " +
                 std::to_string(data) + " data bytes are zeros");
        }
      }
      const typename S::Reader rd(row, D);
      for (std::int32_t d = 0; d < D; ++d) {
        if (const float x = rd[d]; !holds(x)) {
          c.fail("section 'store': row " + std::to_string(r) + " element " + std::to_string(d) +
                 " decodes to " + format_float(x) + "; " + range);
        }
      }
    }
    for (index_t s = 0; s < e.cache_slots(); ++s) {
      index_t tag;
      std::memcpy(&tag, payload[2] + s * 8, 8);
      if (tag < 0) continue;  // an empty slot's row is never read
      for (std::int32_t d = 0; d < D; ++d) {
        float x;
        std::memcpy(&x, payload[1] + (static_cast<std::size_t>(s) * D + d) * 4, 4);
        if (!holds(x)) {
          c.fail("section 'cache_rows': slot " + std::to_string(s) + " (row " + std::to_string(tag) +
                 ") element " + std::to_string(d) + " = " + format_float(x) + "; cached rows of " + range);
        }
      }
    }
    if (opt_name.empty()) return;
    using P = typename E::state_precision;
    KnownOptimizers::visit(opt_name, [&]<class Opt>() {
      using Rule = OptimizerRule<Opt>;
      const auto S = static_cast<std::size_t>(Rule::state_floats(D));
      if (S == 0) return;
      std::vector<float> st(S);
      const auto refuse = [&](const std::string& where) {
        std::string v;
        for (std::size_t k = 0; k < S && k < 8; ++k) v += (k ? ", " : "") + format_float(st[k]);
        if (S > 8) v += ", ...";
        c.fail(where + " holds " + Rule::name + " state [" + v + "]; it must be " + Rule::state_domain);
      };
      for (index_t r = 0; r < e.total_rows_; ++r) {  // decoded from the file's precision (P's)
        const std::uint8_t* row = payload[6] + static_cast<std::size_t>(r) * S * P::value_bytes;
        for (std::size_t k = 0; k < S; ++k)
          st[k] = num::decode_state(P::format, row, static_cast<std::int64_t>(k));
        if (!Rule::state_ok(st.data(), D)) refuse("section 'optimizer': row " + std::to_string(r));
      }
      // From version 3, compact precisions: the FP32 state of the occupied cache slots.
      if (!P::cached || payload[io::checkpoint::kOptimizerCacheSection] == nullptr) return;
      for (index_t s = 0; s < e.cache_slots(); ++s) {
        index_t tag;
        std::memcpy(&tag, payload[2] + s * 8, 8);
        if (tag < 0) continue;  // an empty slot's state is never read
        std::memcpy(st.data(),
                    payload[io::checkpoint::kOptimizerCacheSection] + static_cast<std::size_t>(s) * S * 4,
                    S * 4);
        if (!Rule::state_ok(st.data(), D)) {
          refuse("section 'optimizer_cache': slot " + std::to_string(s) + " (row " + std::to_string(tag) +
                 ")");
        }
      }
    });
  }

  /// load(): the pending_batch payload is one batch of valid CSR input for e's tables;
  /// returns its indices and offsets.
  template <class E>
  static void check_pending(const E& e, ckpt::Cursor& c, const std::uint8_t* p, std::uint64_t len,
                            std::vector<std::int64_t>& indices, std::vector<std::int64_t>& offsets) {
    const std::string sec = "section 'pending_batch': ";
    if (len < 16 || (len - 16) % 8 != 0) c.fail(sec + "length " + std::to_string(len) + " is not 16 + 8k");
    std::int64_t n, B;
    std::memcpy(&n, p, 8);
    std::memcpy(&B, p + 8, 8);
    const std::uint64_t words = (len - 16) / 8;  // n + T*B + 1
    const auto T = static_cast<std::uint64_t>(e.num_tables());
    if (n < 0 || B < 0 || static_cast<std::uint64_t>(n) >= words ||
        static_cast<std::uint64_t>(B) > words / T ||
        (words - static_cast<std::uint64_t>(n) - 1) != T * static_cast<std::uint64_t>(B)) {
      c.fail(sec + "n = " + std::to_string(n) + ", B = " + std::to_string(B) + " do not match its " +
             std::to_string(words) + " entries (n + T*B + 1 with T = " + std::to_string(T) + ")");
    }
    indices.resize(static_cast<std::size_t>(n));
    offsets.resize(static_cast<std::size_t>(words) - indices.size());
    if (!indices.empty())
      std::memcpy(indices.data(), p + 16, indices.size() * 8);  // n = 0: data() may be null
    std::memcpy(offsets.data(), p + 16 + indices.size() * 8, offsets.size() * 8);
    if (offsets.front() != 0) c.fail(sec + "offsets[0] = " + std::to_string(offsets.front()) + "; must be 0");
    if (offsets.back() != n) {
      c.fail(sec + "offsets[" + std::to_string(offsets.size() - 1) + "] = " + std::to_string(offsets.back()) +
             "; must equal n = " + std::to_string(n));
    }
    for (std::size_t j = 0; j + 1 < offsets.size(); ++j) {
      if (offsets[j] > offsets[j + 1]) {
        c.fail(sec + "offsets[" + std::to_string(j + 1) + "] = " + std::to_string(offsets[j + 1]) +
               " < offsets[" + std::to_string(j) + "] = " + std::to_string(offsets[j]));
      }
    }
    for (std::size_t j = 0; j + 1 < offsets.size(); ++j) {  // offsets are valid: every bag lies in [0, n)
      const std::size_t t = j / static_cast<std::size_t>(B);
      const std::int64_t rows = e.config_.table_rows[t];
      for (std::int64_t i = offsets[j]; i < offsets[j + 1]; ++i) {
        const std::int64_t x = indices[static_cast<std::size_t>(i)];
        if (x < 0 || x >= rows) {
          c.fail(sec + "indices[" + std::to_string(i) + "] = " + std::to_string(x) + " is outside table " +
                 std::to_string(t) + " (" + std::to_string(rows) + " rows)");
        }
      }
    }
  }

  // ---- store access for mpe/io/fbgemm.hpp (also read_file_rows, write_file_rows) ----
  /// Drops the cache lines of global rows [first, first + count) without write-back; other
  /// lines and the batches stay (as set_weights does).
  template <class E>
  static void drop_rows(E& e, index_t first, index_t count) {
    e.admit_pending();
    const index_t slots = e.cache_slots();
    if (slots == 0) return;
    if (const StateRef state = e.state_ref(); state.active()) {  // keep the state of dirty rows
      e.backend_.for_each(
          slots, KeepStateOfSlots<typename E::rounding_type>{e.cache_ref(), state, first, count, e.step_ptr(),
                                                             &e.counters_.data()->stats.saturated_rows});
    }
    e.backend_.for_each(slots, DropRows{e.cache_ref(), first, count});
  }
  /// Adds `rows` to stats().saturated_rows (queued on the backend).
  template <class E>
  static void count_saturated(E& e, std::int64_t rows) {
    if (rows > 0)
      e.backend_.for_each(
          1, AddCount{&e.counters_.data()->stats.saturated_rows, static_cast<std::uint64_t>(rows)});
  }
};

}  // namespace mpe::detail
