// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/io/checkpoint_reader.inl
/// @brief The verifying checkpoint reader behind io::load() and io::load_from_bytes(): parses
/// header, sections and trailer, has checkpoint_verify.inl check the contents and only then
/// replaces the table's state through CachedEmbedding::restore_state() (included by
/// mpe/io/checkpoint.hpp). The format is documented in mpe/io/checkpoint_format.hpp.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpe/detail/io/bytes.hpp"

namespace mpe::detail::ckpt {

namespace fmt = ::mpe::io::checkpoint;

/// A u16-length-prefixed name (Bytes::str's layout) of at most fmt::kMaxNameBytes bytes.
inline std::string read_name(Cursor& c, const char* field) {
  const auto n = c.get<std::uint16_t>(field);
  if (n > fmt::kMaxNameBytes) {
    c.fail(std::string(field) + " length " + std::to_string(n) + " at byte " + std::to_string(c.pos - 2) +
           " exceeds " + std::to_string(fmt::kMaxNameBytes));
  }
  const auto* p = c.take(n, field);
  return std::string(reinterpret_cast<const char*>(p), n);
}

inline std::string hex32(std::uint32_t x) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 7; i >= 0; --i) s += d[(x >> (4 * i)) & 0xf];
  return s;
}

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

inline CacheStats stats_from_array(const std::uint64_t* a) {
  CacheStats s;
  std::uint64_t* f[fmt::kNumStats] = {&s.lookups,      &s.unique_rows,        &s.hits,
                                      &s.misses,       &s.conflict_misses,    &s.evictions,
                                      &s.writebacks,   &s.lfu_rejections,     &s.saturated_rows,
                                      &s.bytes_filled, &s.bytes_written_back, &s.skipped_steps};
  for (std::uint32_t i = 0; i < fmt::kNumStats; ++i) *f[i] = a[i];
  return s;
}

/// `bytes` bytes at `p` (a section's payload) as a span of T: in place where `p` is aligned
/// for T, else copied into `copy`.
template <class T>
std::span<const T> typed(const std::uint8_t* p, std::uint64_t bytes, std::vector<T>& copy) {
  const auto n = static_cast<std::size_t>(bytes / sizeof(T));
  if (n == 0) return {};
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) == 0) return {reinterpret_cast<const T*>(p), n};
  copy.resize(n);
  std::memcpy(copy.data(), p, n * sizeof(T));
  return copy;
}

/// Verifies `data` (a whole checkpoint, `n` bytes) against `e`'s configuration and, only if
/// all of it is valid, replaces e's state with it (CachedEmbedding::restore_state). `source`
/// names the file in messages.
template <class E>
void load_bytes(E& e, const std::uint8_t* data, std::size_t n, const std::string& source) {
  namespace fmt = io::checkpoint;
  using S = typename E::storage_type;
  using C = typename E::cache_policy;
  using R = typename E::rounding_type;
  using P = typename E::state_precision;
  const std::string prefix = "mpe::CachedEmbedding::load: '" + source + "': ";
  Cursor c{data, n, 0, n, prefix};
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
    c.fail("header checksum mismatch (stored " + hex32(stored_crc) + ", computed " + hex32(crc) + ")");
  }
  // ---- header fields (inside the checksummed header) ----
  c.end = H - 4;
  auto quote = [](const std::string& s) { return "'" + s + "'"; };
  if (auto s = read_name(c, "storage"); s != S::name) mismatch("storage", quote(s), quote(S::name));
  if (auto s = read_name(c, "cache_policy"); s != C::name) mismatch("cache policy", quote(s), quote(C::name));
  if (auto w = c.get<std::uint32_t>("ways"); w != static_cast<std::uint32_t>(C::ways)) {
    mismatch("ways", std::to_string(w), std::to_string(C::ways));
  }
  if (auto s = read_name(c, "rounding"); s != R::name) mismatch("rounding", quote(s), quote(R::name));
  const auto T = c.get<std::uint32_t>("T");
  if (T != e.config().table_rows.size()) {
    mismatch("table count", std::to_string(T), std::to_string(e.config().table_rows.size()));
  }
  for (std::uint32_t t = 0; t < T; ++t) {
    const auto r = c.get<std::int64_t>("table_rows");
    if (r != e.config().table_rows[t]) {
      mismatch("table_rows[" + std::to_string(t) + "] =", std::to_string(r),
               std::to_string(e.config().table_rows[t]));
    }
  }
  auto expect_eq = [&](const char* field, auto file, auto here) {
    if (file != here) mismatch(field, std::to_string(file), std::to_string(here));
  };
  expect_eq("dim", c.get<std::int32_t>("dim"), e.config().dim);
  expect_eq("row_alignment", c.get<std::int32_t>("row_alignment"), e.config().row_alignment);
  expect_eq("store_row_bytes", c.get<std::uint64_t>("store_row_bytes"),
            static_cast<std::uint64_t>(e.state_row_bytes()));
  expect_eq("num_sets", c.get<std::int64_t>("num_sets"), static_cast<std::int64_t>(e.num_sets()));
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
    opt_name = read_name(c, "optimizer");
  }
  const auto state_floats = c.get<std::uint32_t>("optimizer_state_floats");
  // The optimizer must be one this build knows, with its state size for this D.
  std::int64_t known_state_floats = 0;
  if (!opt_name.empty() && !KnownOptimizers::visit(opt_name, [&]<class Opt>() {
        known_state_floats = OptimizerRule<Opt>::state_floats(e.config().dim);
      })) {
    c.fail("optimizer " + quote(opt_name) + " is not an optimizer this build knows");
  }
  if (static_cast<std::int64_t>(state_floats) != known_state_floats) {
    c.fail("optimizer_state_floats = " + std::to_string(state_floats) + " is invalid for optimizer " +
           quote(opt_name.empty() ? "none" : opt_name) + " (" + std::to_string(known_state_floats) +
           " at dim " + std::to_string(e.config().dim) + ")");
  }
  // The state's precision (from version 3; versions 1 and 2 hold FP32 state): a mismatch is a
  // usage error, not a bad file.
  const std::string precision = version >= 3 ? read_name(c, "state_precision") : std::string("fp32");
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
  // The sizes of this table's buffers (sections 0 to 5; the store in state form).
  const auto here = e.state();
  const std::uint64_t here_bytes[fmt::kNumBufferSections - 1] = {
      static_cast<std::uint64_t>(e.total_rows()) * e.state_row_bytes(),
      here.cache_rows.size_bytes(),
      here.tags.size_bytes(),
      here.last_use.size_bytes(),
      here.dirty.size_bytes(),
      here.policy_words.size_bytes()};
  const auto rows = static_cast<std::uint64_t>(e.total_rows());
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
    const std::string name = read_name(c, "section name");
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
                                                                    : here_bytes[i];
    if (len != expect) {
      c.fail("section " + quote(want) + " is " + std::to_string(len) + " bytes, expected " +
             std::to_string(expect));
    }
    payload[i] = c.take(static_cast<std::size_t>(len), ("section '" + want + "'").c_str());
    const auto stored = c.get<std::uint32_t>(("section '" + want + "' checksum").c_str());
    if (const std::uint32_t crc = fmt::crc32c(payload[i], static_cast<std::size_t>(len)); crc != stored) {
      c.fail("section " + quote(want) + " checksum mismatch (stored " + hex32(stored) + ", computed " +
             hex32(crc) + ")");
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
    c.fail("file checksum mismatch (stored " + hex32(stored) + ", computed " + hex32(file_crc_here) + ")");
  }
  check_cache(e, c, payload, version, populate_counter, decay_clock);
  // ---- values: every one must be one the state can hold (checksums alone do not say) ----
  check_values(e, c, payload, opt_name);
  std::vector<std::int64_t> pending_indices, pending_offsets;
  if (pending_len > 0) {
    check_pending(e, c, payload[fmt::kNumBufferSections], pending_len, pending_indices, pending_offsets);
  }
  // ---- the image: spans into the file's bytes (typed parts copied where the file does not
  // align them), then the table's restore_state() (allocation first, then copies) ----
  typename E::state_type image;
  std::vector<float> cache_rows, cached_state;
  std::vector<std::int64_t> tags;
  std::vector<std::uint64_t> last_use;
  std::vector<std::uint32_t> words;
  // The header named these policies and shapes and was verified against e's above.
  image.storage = E::storage_type::name;
  image.cache_policy = E::cache_policy::name;
  image.rounding = E::rounding_type::name;
  image.state_precision = E::state_precision::name;
  image.ways = static_cast<std::int32_t>(E::cache_policy::ways);
  image.dim = e.dim();
  image.table_rows = e.config().table_rows;
  image.store = {payload[0], static_cast<std::size_t>(here_bytes[0])};
  image.store_stride = e.state_row_bytes();
  image.cache_rows = typed(payload[1], here_bytes[1], cache_rows);
  image.tags = typed(payload[2], here_bytes[2], tags);
  image.last_use = typed(payload[3], here_bytes[3], last_use);
  image.dirty = {payload[4], static_cast<std::size_t>(here_bytes[4])};
  image.policy_words = typed(payload[fmt::kPolicySection], here_bytes[fmt::kPolicySection], words);
  image.optimizer = opt_name;
  image.state_values_per_row = state_floats;
  image.optimizer_state = {payload[6], static_cast<std::size_t>(opt_bytes)};
  if (opt_cache_bytes > 0) {
    image.cached_optimizer_state = typed(payload[fmt::kOptimizerCacheSection], opt_cache_bytes, cached_state);
  }
  image.stats = stats_from_array(st);
  image.step = step;
  image.decay_clock = decay_clock;
  image.populate_counter = populate_counter;
  image.calls = calls;
  image.seed = seed;
  image.pending_indices = pending_indices;
  image.pending_offsets = pending_offsets;
  e.restore_state(image);
}

}  // namespace mpe::detail::ckpt
