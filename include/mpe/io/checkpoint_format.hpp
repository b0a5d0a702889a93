// SPDX-License-Identifier: Apache-2.0
/// @file mpe/io/checkpoint_format.hpp
/// @brief The on-disk format of `CachedEmbedding::save()` / `load()` ("MPECKPT1",
/// version 4; version 1, 2 and 3 files still load), and the CRC-32C that protects it.
///
/// Every integer is little-endian; floats are IEEE binary32 bit patterns, little-endian
/// (the format is only read and written on little-endian hosts; a static_assert says so).
/// A string is `u16 length` + that many bytes (no terminator). Every object, whatever its
/// policies and StatePrecision, writes version 4. The file is, in order:
///
/// **Header** (offsets from the start of the file)
///
// clang-format off
/// | offset | field | notes |
/// |---|---|---|
/// | 0  | `char magic[8]` | `"MPECKPT1"` |
/// | 8  | `u32 version` | 4 (older versions: see "Versions 1 to 3" below) |
/// | 12 | `u32 header_bytes` | H: bytes from offset 0 up to and including the header CRC |
/// | 16 | `str storage` | `Storage::name`, e.g. `"int8_rowwise"` |
/// |    | `str cache_policy` | `Cache::name`: `"lru"`, `"lfu"`, `"direct_mapped"`, `"second_touch_lru"`, `"wtinylfu"` |
/// |    | `u32 ways` | `Cache::ways` |
/// |    | `str rounding` | `Rounding::name`: `"stochastic"`, `"nearest"` |
/// |    | `u32 T`, `i64 table_rows[T]` | rows of each table |
/// |    | `i32 dim`, `i32 row_alignment` | D and the store row padding |
/// |    | `u64 store_row_bytes` | bytes of one padded store row, row_bytes<Storage>(dim, row_alignment) (without the slot index entry of EmbeddingConfig::slot_index_in_rows) |
/// |    | `i64 num_sets`, `i64 cache_slots` | num_sets * ways = cache_slots (0: no cache) |
/// |    | `i64 policy_words` | `Cache::meta_words(cache_slots)`: u32 words of the policy section |
/// |    | `u64 seed` | stochastic-rounding seed (load() adopts it) |
/// |    | `u64 step` | completed backward() calls |
/// |    | `u64 populate_counter` | batches populated so far (LRU's clock) |
/// |    | `u64 decay_clock` | unique rows since the policy's last decay, below `Cache::decay_period` |
/// |    | `str optimizer` | `OptimizerRule::name` of the optimizer that owns the state, empty before the first applied step |
/// |    | `u32 optimizer_state_floats` | S, state values per table row (`OptimizerRule::state_floats(D)`: Sgd 0, RowwiseAdagrad 1, Adagrad D, Adam 2D); 0 before the first applied step |
/// |    | `str state_precision` | `StatePrecision::name`: `"fp32"`, `"bf16"`, `"fp16"` |
/// |    | `u32 n_stats`, `u64 stats[n_stats]` | CacheStats in declaration order, 12 (load() accepts fewer: the rest read 0) |
/// |    | `u64 calls` | prefetch(), forward() and backward() calls so far, failed ones included (with a defer_admission forward() pending: all but that forward(), which the resumed run repeats): the next call is number calls + 1, the number a deferred validation error names; at least `populate_counter`, below 2^63 - 1 |
/// |    | `u32 n_sections` | 9 |
/// | H-4 | `u32 header_crc` | CRC-32C of bytes [0, H-4) |
// clang-format on
///
/// **Sections**, exactly these nine in this order, each `str name`, `u64 length` (bytes),
/// the payload, then `u32 crc` = CRC-32C of the payload:
///
// clang-format off
/// | # | name | payload | length |
/// |---|---|---|---|
/// | 0 | `store` | the store, rows x store_row_bytes, padding included as zeros, load() refuses any other byte there (Storage's row layout; no slot index entries) | rows * store_row_bytes |
/// | 1 | `cache_rows` | FP32 cache rows (slots, D) | slots * D * 4 |
/// | 2 | `tags` | i64 global row per slot, -1 = empty | slots * 8 |
/// | 3 | `last_use` | u64 LRU score per slot (populate counter of its last batch) | slots * 8 |
/// | 4 | `dirty` | u8 per slot, 0 or 1 | slots |
/// | 5 | `Cache::name` (`lru`, `lfu`, `direct_mapped`, `second_touch_lru`, `wtinylfu`) | the cache policy's metadata (table below) | policy_words * 4 |
/// | 6 | `optimizer` | state (rows, S) in the header's state_precision: FP32 values, or BF16/FP16 u16 bit patterns | rows * S * 4 (fp32), rows * S * 2 (bf16, fp16) |
/// | 7 | `pending_batch` | the prefetched batch not yet consumed by forward(): `i64 n`, `i64 B`, `i64 indices[n]`, `i64 offsets[T*B + 1]`; empty when there is none | 0, or 16 + 8 * (n + T*B + 1) |
/// | 8 | `optimizer_cache` | bf16/fp16 with a cache: FP32 state of the cached rows (slots, S), slot order as `tags` (an empty slot's entries are written but never read); empty for fp32 (cached rows keep no state copy), without a cache, or before the first applied step | slots * S * 4, or 0 |
// clang-format on
///
/// **Policy section.** Section 5 is named by the cache policy (`Cache::name`) and holds
/// its metadata array as the library keeps it in memory (`Cache::meta_words(slots)`
/// little-endian u32 words; mpe/cache/policy.hpp), checked on load by `Cache::check_meta`:
///
// clang-format off
/// | policy | section name | payload |
/// |---|---|---|
/// | `Lru<W>`, `DirectMapped` | `lru`, `direct_mapped` | empty |
/// | `Lfu<W>` | `lfu` | count-min sketch, 4 lines x width u32 counters, line-major (width: smallest power of two >= max(16, 2 x slots)) |
/// | `SecondTouchLru<W>` | `second_touch_lru` | doorkeeper, `words` u32 (smallest power of two >= max(32, slots)): low 16 bits the current generation, high 16 the previous (mpe::DoorkeeperRef); files written before 2026-12-04 held LFU's sketch here and are refused by the header's `policy_words` check (a different word count) |
/// | `WTinyLfu<W>` | `wtinylfu` | the same sketch, then one byte per slot (segment: 0 window, 1 probation, 2 protected; meaningless for an empty slot), zero-padded to a multiple of 4 bytes |
// clang-format on
///
/// **Optimizer state precision** (mpe/optim/state_precision.hpp). With `"fp32"` the
/// `optimizer` section is the state itself (updated in place). With `"bf16"` or `"fp16"`
/// it holds the state of rows not cached, and of cached rows as last written back, and
/// `optimizer_cache` holds the current FP32 state of every cached row. load() refuses a
/// file whose precision is not the object's StatePrecision with std::invalid_argument
/// naming both (versions 1 and 2 count as `"fp32"`), and checks every decoded `optimizer`
/// row and every occupied slot's `optimizer_cache` entry against the optimizer's state
/// domain.
///
/// **Versions 1 to 3** (load() reads all three; it refuses any other version, naming it).
/// They differ from version 4 only in these points:
///
// clang-format off
/// | item | version 3 | version 2 | version 1 |
/// |---|---|---|---|
/// | `u64 calls` | absent: load() sets the call counter to populate_counter + step (see below) | as version 3 | as version 3 |
/// | `policy_words` | as version 4 | `i64 sketch_width`: the LFU sketch width (the section holds 4 lines of it), 0 for the other policies | as version 2 |
/// | `decay_clock` | as version 4 | `u64 sketch_increments`: the same clock, for LFU | as version 2 |
/// | `str optimizer` | as version 4 | as version 4 | `u32 optimizer_kind`: 0 none, 1 `sgd`, 2 `rowwise_adagrad` |
/// | `str state_precision` | as version 4 | absent: the state is FP32 | absent: the state is FP32 |
/// | sections | as version 4 | 8: no `optimizer_cache` | 7: no `pending_batch`, no `optimizer_cache` |
/// | section 5 | as version 4 | named `sketch`: the LFU sketch, empty for other policies | as version 2 |
// clang-format on
///
/// A version 1 or 2 file of `Lru`, `Lfu` or `DirectMapped` thus loads unchanged into an
/// object with StateFp32: its `sketch` section is exactly the version 3 and 4 section of
/// the same policy, and its `optimizer` section the FP32 state. Versions 1 to 3 do not
/// count the calls; load() sets the counter to the calls such a file implies,
/// populate_counter + step (every populate was one prefetch() or forward() call, every
/// completed step one backward() call; at most 2^63 - 2): exact for a loop of forward()
/// and backward() with no prefetch() and no failed call, below the true count otherwise
/// (a forward() that consumed a prefetch, a failed call). From version 4 on, deferred
/// errors after a load are numbered exactly as in the run that never stopped.
///
/// **Trailer**: `char end_magic[8]` = `"MPECKEND"`, `u64 file_bytes` (the whole file,
/// trailer included), `u32 file_crc` = CRC-32C of every byte before `file_crc`. Nothing
/// may follow.
///
/// What is saved of the pipeline: the batch of a pending prefetch() (its cache fills, hits
/// and counters are already in the state), so that the first forward() after load() with
/// that batch consumes it exactly as the uninterrupted run would (no second populate). A
/// batch awaiting backward() is not saved (save between training steps; after load() a
/// backward() without a new forward() throws std::logic_error). Under
/// Validation::Deferred a prefetched batch that failed its validation is not saved either.
///
/// What load() verifies beyond the framing and checksums (a file whose checksums are valid
/// may still hold values the state cannot): every store row decodes (as the store's Reader
/// does) to finite values within Storage::limit; every occupied cache row is finite and
/// within Storage::limit; tags, dirty bits and last-use scores are consistent with the
/// sets; the policy section passes `Cache::check_meta` and the decay clock is below the
/// policy's period; the optimizer is known, its state has that optimizer's size and every
/// value is in its domain (RowwiseAdagrad: finite and >= 0), for the `optimizer` section
/// as decoded from its precision and for each occupied slot of `optimizer_cache`; the
/// pending batch's offsets and indices are valid for the tables; the call counter is at
/// least `populate_counter` (every populate is one prefetch() or forward() call) and below
/// 2^63 - 1 (the next call's number is an i64). Each failure names the section, the row or slot (or the
/// header field), and the value.
///
/// Memory and sync: save() streams the buffers (through a 4 MiB host staging buffer when
/// the backend's memory is not host memory) and needs no copy of the state. load() reads
/// the whole file into host memory (one extra copy of the state, file-sized) and verifies
/// all of it there; only then does it copy the sections into the object's existing buffers
/// (backend copy_from_host; new optimizer-state buffers, for `optimizer` and
/// `optimizer_cache`, are allocated first when their sizes change). Both synchronize.
/// load() adopts the file's seed, step, counters (the call counter included) and stats.
///
/// CRC-32C is the Castagnoli CRC (reflected polynomial 0x82F63B78, initial and final
/// XOR 0xFFFFFFFF; RFC 3720 appendix B.4), check value crc32c("123456789") = 0xE3069283.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace mpe::io::checkpoint {

static_assert(std::endian::native == std::endian::little,
              "mpe checkpoints are written and read on little-endian hosts only");

/// The first 8 bytes of every checkpoint file.
inline constexpr char kMagic[8] = {'M', 'P', 'E', 'C', 'K', 'P', 'T', '1'};
/// The first 8 bytes of the trailer.
inline constexpr char kEndMagic[8] = {'M', 'P', 'E', 'C', 'K', 'E', 'N', 'D'};
/// Version every object writes.
inline constexpr std::uint32_t kVersion = 4;
/// Oldest version load() reads (version 1: no `pending_batch` section).
inline constexpr std::uint32_t kMinVersion = 1;
/// Number of CacheStats counters written (every version).
inline constexpr std::uint32_t kNumStats = 12;
/// Sections of versions 3 and 4.
inline constexpr std::uint32_t kNumSections = 9;
/// Sections held in the object's buffers (all but `pending_batch`); version 1 has these only.
inline constexpr std::uint32_t kNumBufferSections = 7;
/// Section names in file order; index kPolicySection is the version 1 and 2 name (`sketch`).
inline constexpr const char* kSectionNames[kNumSections] = {"store",     "cache_rows",    "tags",
                                                            "last_use",  "dirty",         "sketch",
                                                            "optimizer", "pending_batch", "optimizer_cache"};
/// Index of the cache policy's section.
inline constexpr std::uint32_t kPolicySection = 5;
/// Index of the `optimizer_cache` section (from version 3: FP32 state of the cached rows).
inline constexpr std::uint32_t kOptimizerCacheSection = 8;
/// Name of the cache policy's section in a file of `version`: `policy_name` from version 3.
inline const char* policy_section_name(std::uint32_t version, const char* policy_name) {
  return version >= 3 ? policy_name : kSectionNames[kPolicySection];
}
/// Sections of a file of version v (1: 7, 2: 8, 3 and 4: 9).
constexpr std::uint32_t sections_of_version(std::uint32_t v) { return v == 1 ? 7u : v == 2 ? 8u : 9u; }
/// Bytes of the trailer: end magic, file size, file CRC.
inline constexpr std::size_t kTrailerBytes = 8 + 8 + 4;
/// Longest policy or section name accepted by the reader.
inline constexpr std::size_t kMaxNameBytes = 64;

namespace detail {
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc32c_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  }
  return t;
}
inline constexpr auto kCrc32cTables = make_crc32c_tables();
}  // namespace detail

/// Extends a CRC-32C: `crc32c(data, n, crc32c(prev, m))` equals the CRC of prev then data
/// (like zlib's crc32(crc, buf, len)); `crc = 0` starts a new one. Slicing-by-8.
inline std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0) {
  const auto& t = detail::kCrc32cTables;
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  while (n >= 8) {
    const std::uint32_t lo =
        c ^ (static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
             static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][p[4]] ^
        t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xffu];
  return ~c;
}

}  // namespace mpe::io::checkpoint
