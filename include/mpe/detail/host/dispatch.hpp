// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/dispatch.hpp
/// @brief HostBackend's fast paths and their one dispatch point (not public): the build
/// switches, the run-time choice among the AVX-512, AVX2 and portable code, the host's SIMD
/// prefetch distances, and `HostPaths`, the customization points of the per-item functors
/// (detail/kernels/portable_paths.hpp) that HostBackend names as its `fast_paths`.
///
/// Switches:
/// - `MPE_HOST_SIMD` (1 or 0): the SIMD code is compiled, on x86-64 with GCC or Clang, outside
///   device code, unless `MPE_NO_HOST_SIMD` is defined. The kernels carry
///   `__attribute__((target(...)))`, so the default build stays baseline x86-64.
/// - `MPE_HOST_AVX512` (1 or 0): the AVX-512 code is compiled as well, unless
///   `MPE_NO_HOST_AVX512` is defined.
/// - Run time: the AVX2 (+F16C) code runs where the CPU reports it (`set_host_simd(false)`
///   turns it off), the AVX-512 (F, BW, VL) code where the CPU reports that too
///   (`set_host_avx512(false)`); host_isa() names the choice. The switches are read once per
///   call, batch or set and passed down, never per row.
/// - `MPE_POOL_PREFETCH_AHEAD` (detail/kernels/prefetch.hpp) sets kPoolPrefetchAhead, the
///   portable loops' distance and the least of pool_rows_ahead below.
///
/// The ISA folders hold only ISA code: avx2/ (pooling, fills, tag scan, row stores), avx512/
/// (the same where AVX-512 pays), common/ (the 8-lane decoders, row sources and scalar helpers
/// both use). This header includes them where the switches allow. Every path gives the bits
/// of the portable code (docs/host_kernels.md; tests/host pins them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/detail/kernels/prefetch.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/numeric/rounding.hpp"
#include "mpe/storage/all.hpp"

#if !defined(MPE_NO_HOST_SIMD) && !defined(__CUDA_ARCH__) && defined(__x86_64__) && \
    (defined(__GNUC__) || defined(__clang__))
#define MPE_HOST_SIMD 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define MPE_HOST_SIMD 0
#endif

#if MPE_HOST_SIMD && !defined(MPE_NO_HOST_AVX512)
#define MPE_HOST_AVX512 1
#else
#define MPE_HOST_AVX512 0
#endif

namespace mpe::detail {

#if MPE_HOST_SIMD

/// True when this CPU can run the AVX2 + F16C kernels (checked once).
inline bool cpu_has_avx2_f16c() {
  static const bool has = [] {
    __builtin_cpu_init();
    // F16C through CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
  }();
  return has;
}

/// The run-time switch of the host SIMD paths (default: on where the CPU has AVX2 and F16C).
inline bool& host_simd_flag() {
  static bool on = cpu_has_avx2_f16c();
  return on;
}

/// Whether the host SIMD paths (pooling, fills, tag scans, row stores) run now.
inline bool host_simd_enabled() { return host_simd_flag(); }

/// Turns the host SIMD paths on (only where the CPU supports them) or off; returns the
/// previous setting. For tests comparing the paths; not thread-safe against running calls.
inline bool set_host_simd(bool on) {
  const bool was = host_simd_flag();
  host_simd_flag() = on && cpu_has_avx2_f16c();
  return was;
}

#else  // !MPE_HOST_SIMD

/// Without MPE_HOST_SIMD: no AVX2 code.
inline bool cpu_has_avx2_f16c() { return false; }
/// Without MPE_HOST_SIMD: the portable code always.
inline bool host_simd_enabled() { return false; }
/// Without MPE_HOST_SIMD: nothing to turn on; returns false.
inline bool set_host_simd(bool) { return false; }

#endif

#if MPE_HOST_AVX512

/// True when this CPU (and OS) can run the AVX-512 F / BW / VL kernels (checked once).
inline bool cpu_has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return cpu_has_avx2_f16c() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return has;
}

/// The run-time switch of the AVX-512 paths (default: on where the CPU has it).
inline bool& host_avx512_flag() {
  static bool on = cpu_has_avx512();
  return on;
}

/// Whether the AVX-512 paths (pooling, row stores, SetVictims' list and minimum) run now; they
/// also need the host SIMD paths on: set_host_simd(false) turns both off.
inline bool host_avx512_enabled() { return host_avx512_flag() && host_simd_enabled(); }

/// Turns the AVX-512 paths on (only where the CPU supports them) or off; returns the previous
/// setting. For tests and benchmarks comparing the kernels; not thread-safe against running
/// calls.
inline bool set_host_avx512(bool on) {
  const bool was = host_avx512_flag();
  host_avx512_flag() = on && cpu_has_avx512();
  return was;
}

#else  // !MPE_HOST_AVX512

/// Without MPE_HOST_AVX512: no AVX-512 code.
inline bool cpu_has_avx512() { return false; }
/// Without MPE_HOST_AVX512: the AVX2 or portable code.
inline bool host_avx512_enabled() { return false; }
/// Without MPE_HOST_AVX512: nothing to turn on; returns false.
inline bool set_host_avx512(bool) { return false; }

#endif

/// The code HostPaths runs now.
enum class HostIsa : std::uint8_t {
  Portable,  ///< the portable per-item code
  Avx2,      ///< AVX2 + F16C
  Avx512     ///< AVX-512 F / BW / VL where it pays, AVX2 elsewhere
};

/// The host's choice now (the switches above).
inline HostIsa host_isa() {
  if (host_avx512_enabled()) return HostIsa::Avx512;
  return host_simd_enabled() ? HostIsa::Avx2 : HostIsa::Portable;
}

/// Occurrences ahead whose rows store-only pooling prefetches, for rows of `lines` prefetch
/// points: about 128 lines in flight (128 / lines rows), at least kPoolPrefetchAhead
/// (FBGEMM's 16) and at most 64 rows (or kPoolPrefetchAhead where that is larger); D = 64:
/// FP32 32 rows, FP16 / INT8 / INT4 64. A fixed distance in rows would put few lines in
/// flight for small rows and too many for large ones; a budget in lines keeps the memory
/// system's parallelism about the same for every format. The bits do not depend on it.
inline index_t pool_rows_ahead(std::int32_t lines) {
  const index_t lo = kPoolPrefetchAhead, hi = kPoolPrefetchAhead > 64 ? kPoolPrefetchAhead : 64;
  const index_t a = 128 / (lines > 0 ? lines : 1);
  return a < lo ? lo : (a > hi ? hi : a);
}

}  // namespace mpe::detail

#if MPE_HOST_SIMD
#include "mpe/detail/host/avx2/encode.hpp"
#include "mpe/detail/host/avx2/pool.hpp"
#include "mpe/detail/host/common/decode8.hpp"
#include "mpe/detail/host/common/rows.hpp"
#endif
#if MPE_HOST_AVX512
#include "mpe/detail/host/avx512/encode.hpp"
#include "mpe/detail/host/avx512/pool.hpp"
#endif

namespace mpe::detail {

#if MPE_HOST_SIMD
// AVX2 + F16C (as avx2/pool.hpp's functions; undefined below).
#define MPE_POOL_SIMD_TARGET __attribute__((target("avx2,f16c")))

/// The host SIMD pooling of PoolBags' ranges (HostPaths::pool_range): per bag, store rows
/// only (no cache), the FP32 cache rows as a store (every row of the bag cached), both by the
/// AVX-512 kernel where the CPU has it, or each row from its slot or the store by the AVX2
/// kernel; runs of one-row bags in one loop, and, on an AVX-512 host, each table's bags of
/// an unweighted store-only sum of D = 16 .. 128 (simd512::pool_bags_run, where the range
/// averages more than one row per bag). `wide` (host_avx512_enabled) is read once per range.
namespace host_pool {

/// `count` one-row bags from occurrence i0 of `src`, outputs o_stride floats apart from o:
/// simd512::pool_single_rows where `wide`, else simd::pool_single_rows (the same bits).
template <class S, class Src>
MPE_POOL_SIMD_TARGET inline void single_run(bool wide, const Src& src, index_t i0, index_t count,
                                            const float* weights, std::int32_t D, float* o,
                                            std::size_t o_stride) {
#if MPE_HOST_AVX512
  if (wide) {
    if (weights) {
      simd512::pool_single_rows<S, true>(src, i0, count, weights, D, o, o_stride);
    } else {
      simd512::pool_single_rows<S, false>(src, i0, count, nullptr, D, o, o_stride);
    }
    return;
  }
#else
  (void)wide;
#endif
  if (weights) {
    simd::pool_single_rows<S, true>(src, i0, count, weights, D, o, o_stride);
  } else {
    simd::pool_single_rows<S, false>(src, i0, count, nullptr, D, o, o_stride);
  }
}

/// One bag [begin, end) into o by simd::pool_bag, rows decoded as format S.
template <class S, class Src>
MPE_POOL_SIMD_TARGET inline void one(const Src& src, index_t begin, index_t end, const float* weights,
                                     std::int32_t D, float* o) {
  if (weights) {
    simd::pool_bag<S, true>(src, begin, end, weights, D, o);
  } else {
    simd::pool_bag<S, false>(src, begin, end, nullptr, D, o);
  }
}

/// One bag [begin, end) of one row array into o: simd512::pool_bag where `wide`, else one.
template <class S>
MPE_POOL_SIMD_TARGET inline void rows(bool wide, const simd::StoreRows& src, index_t begin, index_t end,
                                      const float* weights, std::int32_t D, float* o) {
#if MPE_HOST_AVX512
  if (wide) {
    if (weights) {
      simd512::pool_bag<S, true>(src, begin, end, weights, D, o);
    } else {
      simd512::pool_bag<S, false>(src, begin, end, nullptr, D, o);
    }
    return;
  }
#else
  (void)wide;
#endif
  one<S>(src, begin, end, weights, D, o);
}

/// Bags [j0, j1) of the PoolBags `f` (its gate open; see the namespace comment).
template <class F>
MPE_POOL_SIMD_TARGET inline void range(const F& f, index_t j0, index_t j1) {
  using Storage = typename F::storage_type;
  const index_t* const offsets = f.offsets;
  const index_t B = f.B, T = f.T;
  const std::int32_t D = f.D;
  const index_t n_all = offsets[B * T];
  // Slots are read ahead only up to the range's end when this pass fills them (probe_out):
  // beyond it lie another thread's occurrences.
  const index_t n_slots = f.probe_out ? offsets[j1] : n_all;
  const std::size_t bytes = Storage::data_bytes(D);
  const simd::StoreRows store_src =
      simd::StoreRows::of(f.store, f.stride, bytes, f.global_rows, n_all, pool_rows_ahead);
  const auto* crows = reinterpret_cast<const std::uint8_t*>(f.cache.rows);
  const std::size_t cbytes = static_cast<std::size_t>(D) * sizeof(float);
  const simd::StoreRows cache_src =
      simd::StoreRows::of(crows, cbytes, cbytes, f.slot_of_occ, n_slots, pool_rows_ahead);
  // probe_out: occurrences [probed, range end) still to read from the slot index, read up
  // to `lead` occurrences past the rows about to be pooled (as far as any prefetch reads a
  // slot), each index entry prefetched kProbeLead occurrences before it is read.
  index_t probed = offsets[j0];
  const index_t lead = cache_src.dist;
  const auto probe_to = [&f, &probed, n_slots](index_t upto) {
    if (!f.probe_out) return;
    constexpr index_t kProbeLead = 64;
    if (upto > n_slots) upto = n_slots;
    for (; probed < upto; ++probed) {
      // An aligned int32 lies in one line: one prefetch.
      if (probed + kProbeLead < n_slots)
        __builtin_prefetch(f.cache.slot_entry(f.global_rows[probed + kProbeLead]));
      f.probe_out[probed] = *f.cache.slot_entry(f.global_rows[probed]);
    }
  };
  const auto row = [&f](index_t i, bool& cached) -> const std::uint8_t* {
    const index_t r = f.global_rows[i];
    const index_t s = f.slot_of(i);
    cached = s >= 0;
    return cached ? reinterpret_cast<const std::uint8_t*>(f.cache.row(s))
                  : f.store + static_cast<std::size_t>(r) * f.stride;
  };
  // Mixed bags: rows pool_rows_ahead(lines of a cache row) occurrences ahead (most of
  // their rows are cached), into L2 as the one-array kernels do: a bag mixes cached FP32
  // rows and store rows, so the distance is set by the longer (cache) row, and L2 rather
  // than L1 leaves room for the rows still being added (docs/host_kernels.md).
  const index_t mixed_dist = cache_src.dist;
  const auto ahead = [&f, n_slots, mixed_dist](index_t i) {
    if (i + mixed_dist < n_slots) f.template prefetch_row<true>(i + mixed_dist);
  };
  const simd::FnRows<decltype(row), decltype(ahead)> mixed_src{row, ahead};
  const bool wide = host_avx512_enabled();
  const float* const weights = f.weights;
  const std::size_t o_stride = static_cast<std::size_t>(T) * static_cast<std::size_t>(D);
  index_t t, b;
  split_bag(j0, B, t, b);
#if MPE_HOST_AVX512
  // Store rows only, unweighted sums of D = 16 .. 128 (a multiple of 16) columns, a range
  // averaging more than one row per bag (a range of one-row bags, a training step's one
  // index per bag, keeps single_run below; a one-row bag here is add(0, x) either way): each
  // table's run of bags in one loop (simd512::pool_bags_run; the same bits as bag by bag).
  if (wide && !f.slot_of_occ && !weights && !f.mean && simd512::bag_run_fits(D) &&
      offsets[j1] - offsets[j0] > j1 - j0) {
    for (index_t j = j0; j < j1;) {
      const index_t k = (j1 - j < B - b) ? j1 - j : B - b;  // bags left in table t
      simd512::pool_bags_run<Storage>(store_src, offsets + j, k, D, f.output + (b * T + t) * D, o_stride);
      j += k;
      b = 0;
      ++t;
    }
    return;
  }
#endif
  for (index_t j = j0; j < j1; ++j) {
    float* o = f.output + (b * T + t) * D;
    const index_t begin = offsets[j], end = offsets[j + 1];
    // A run of one-row bags of table t (the output rows T * D floats apart): one loop. Mean
    // pooling leaves a one-row bag's sums as they are (mul(x, 1.0f) is x for every x the sum
    // add(0, .) can give).
    if (end - begin == 1) {
      index_t most = (j1 - j < B - b) ? j1 - j : B - b;
      // Reading the slots: runs of at most kProbeRun bags, so that a table of one-row bags
      // is not read whole before its first row is pooled.
      constexpr index_t kProbeRun = 64;
      if (f.probe_out && most > kProbeRun) most = kProbeRun;
      index_t k = 1;
      while (k < most && offsets[j + k + 1] - offsets[j + k] == 1) ++k;
      probe_to(begin + k + lead);
      if (f.slot_of_occ) {
        single_run<Storage>(wide, mixed_src, begin, k, weights, D, o, o_stride);
      } else {
        single_run<Storage>(wide, store_src, begin, k, weights, D, o, o_stride);
      }
      j += k - 1;
      b += k;
      if (b == B) {
        b = 0;
        ++t;
      }
      continue;
    }
    probe_to(end + lead);
    bool all_cached = f.slot_of_occ != nullptr;
    for (index_t i = begin; all_cached && i < end; ++i) all_cached = f.slot_of_occ[i] >= 0;
    if (!f.slot_of_occ) {
      rows<Storage>(wide, store_src, begin, end, weights, D, o);
    } else if (all_cached) {
      rows<Fp32>(wide, cache_src, begin, end, weights, D, o);
    } else {
      one<Storage>(mixed_src, begin, end, weights, D, o);
    }
    if (f.mean && end > begin) {
      const float inv = num::div(1.0f, static_cast<float>(end - begin));
      for (std::int32_t d = 0; d < D; ++d) o[d] = num::mul(o[d], inv);
    }
    if (++b == B) {
      b = 0;
      ++t;
    }
  }
}

}  // namespace host_pool

#undef MPE_POOL_SIMD_TARGET
#endif  // MPE_HOST_SIMD

/// Storage::store<Rounding>(src, D, row, rng) (the same bytes and saturation flag); on the
/// host, with the AVX-512 path enabled, INT8, INT4 and INT2 rows under stochastic or
/// nearest rounding by simd512::store_int8 / store_fused_nbit where they apply; with only
/// the AVX2 path (a CPU without AVX-512, or set_host_avx512(false)), by simd::store_int8 /
/// store_fused_nbit (detail/host/avx2/encode.hpp). A row one path declines (it needs
/// sanitizing, or its scale is 0) the other declines too: it takes the scalar store.
template <class Storage, class Rounding>
MPE_HOST_DEVICE inline bool store_row(const float* src, std::int32_t D, std::uint8_t* row,
                                      const num::RowRng& rng) {
#if MPE_HOST_SIMD && !defined(__CUDA_ARCH__)
  constexpr bool kInt8 = std::is_same_v<Storage, Int8Rowwise>;
  constexpr bool kNbit = std::is_same_v<Storage, Int4Rowwise> || std::is_same_v<Storage, Int2Rowwise>;
  if constexpr ((kInt8 || kNbit) &&
                (std::is_same_v<Rounding, StochasticRounding> || std::is_same_v<Rounding, NearestRounding>)) {
    bool done = false;
#if MPE_HOST_AVX512
    if (host_avx512_enabled()) {
      if constexpr (kInt8) {
        done = simd512::store_int8<Rounding>(src, D, row, rng);
      } else {
        done = simd512::store_fused_nbit<Storage::bits, Rounding>(src, D, row, rng, Storage::limit);
      }
      return done ? false : Storage::template store<Rounding>(src, D, row, rng);
    }
#endif
    if (host_simd_enabled()) {
      if constexpr (kInt8) {
        done = simd::store_int8<Rounding>(src, D, row, rng);
      } else {
        done = simd::store_fused_nbit<Storage::bits, Rounding>(src, D, row, rng, Storage::limit);
      }
    }
    if (done) return false;
  }
#endif
  return Storage::template store<Rounding>(src, D, row, rng);
}

/// HostBackend's fast paths: PortablePaths' members, each taking the AVX-512, AVX2 or
/// portable code as the switches above say (the same bits; see portable_paths.hpp for each
/// member's contract).
struct HostPaths {
  /// Whether the host SIMD paths are on (read once per call, batch or set).
  MPE_HOST_DEVICE static bool fast() {
#if MPE_HOST_SIMD
    return host_simd_enabled();
#else
    return false;
#endif
  }

  /// The host's one-thread passes (BitmapUnique, AdmitFused, ScatterRowGradients) run when
  /// the backend runs one thread (`backend.threads() == 1`: its for_each runs the items in
  /// order on the calling thread).
  template <class B>
  static bool sequential(const B& backend) {
    return backend.threads() == 1;
  }

  /// store_row above: the AVX-512 or AVX2 store where it applies, else Storage::store.
  template <class Storage, class Rounding>
  MPE_HOST_DEVICE static bool store_row(const float* src, std::int32_t D, std::uint8_t* row,
                                        const num::RowRng& rng) {
    return detail::store_row<Storage, Rounding>(src, D, row, rng);
  }

  /// A cache fill: simd::decode_row where `fast` and Storage has a decoder (with `stream`, by
  /// non-temporal stores: the writer fences, fence_fills), else the Reader's loop.
  template <class Storage>
  MPE_HOST_DEVICE static void fill_row(const std::uint8_t* src, std::int32_t D, float* dst, bool fast,
                                       bool stream) {
#if MPE_HOST_SIMD
    if constexpr (simd::has_row<Storage>) {
      if (fast) {
        if (stream) {
          simd::decode_row<Storage, true>(src, D, dst);
        } else {
          simd::decode_row<Storage>(src, D, dst);
        }
        return;
      }
    }
#endif
    PortablePaths::fill_row<Storage>(src, D, dst, fast, stream);
  }

  /// Whether a one-thread populate streams its fills: the fill is the SIMD decode and every
  /// cache row is 32-byte aligned (D % 8 == 0).
  template <class Storage>
  static bool stream_fills(std::int32_t D) {
#if MPE_HOST_SIMD
    if constexpr (simd::has_row<Storage>) return host_simd_enabled() && D % 8 == 0;
#endif
    (void)D;
    return false;
  }

  /// `sfence`: the streamed fills are visible to every thread before the pass returns.
  static void fence_fills() {
#if MPE_HOST_SIMD
    _mm_sfence();
#endif
  }

  /// CacheRef::find_in_set, four tags per compare where `fast` (simd::find_tag).
  MPE_HOST_DEVICE static index_t find_in_set(const CacheRef& c, index_t base, index_t row, bool fast) {
#if MPE_HOST_SIMD
    if (fast) {
      const std::int32_t w = simd::find_tag(c.tags + base, c.ways, row);
      return w < 0 ? -1 : base + w;
    }
#endif
    return PortablePaths::find_in_set(c, base, row, fast);
  }

  /// simd512::unlocked_by_last_use on an AVX-512 host, else -1 (SetVictims lists the set).
  MPE_HOST_DEVICE static std::int32_t unlocked_by_last_use(const std::int64_t* tags,
                                                           const std::uint64_t* last_use, std::int32_t ways,
                                                           std::uint64_t floor, index_t base,
                                                           std::int64_t* slot, std::uint64_t* score,
                                                           std::uint64_t* key, bool& packed) {
#if MPE_HOST_AVX512
    if (host_avx512_enabled())
      return simd512::unlocked_by_last_use(tags, last_use, ways, floor, base, slot, score, key, packed);
#endif
    return PortablePaths::unlocked_by_last_use(tags, last_use, ways, floor, base, slot, score, key, packed);
  }

  /// Whether min_key is a SIMD minimum now (the host SIMD paths are on).
  MPE_HOST_DEVICE static bool has_min_key() { return fast(); }

  /// The smallest of the n >= 1 keys: 8 per compare on an AVX-512 host, 4 with AVX2.
  MPE_HOST_DEVICE static std::uint64_t min_key(const std::uint64_t* key, std::int32_t n) {
#if MPE_HOST_AVX512
    if (host_avx512_enabled()) return simd512::min_key(key, n);
#endif
#if MPE_HOST_SIMD
    if (host_simd_enabled()) return simd::min_key(key, n);
#endif
    return PortablePaths::min_key(key, n);
  }

#if MPE_HOST_SIMD
  /// POPCNT, inlined always (also at -O0), so the builtin expands inside bitmap_popcnt.
  struct HardwarePopcount {
    /// The set bits of x.
    [[gnu::always_inline]] inline index_t operator()(std::uint64_t x) const {
      return __builtin_popcountll(x);
    }
  };
  /// BitmapUnique's pass with POPCNT (every CPU with AVX2 has it; a build without -mpopcnt
  /// otherwise calls libgcc).
  template <class F>
  __attribute__((target("popcnt"))) static void bitmap_popcnt(const F& f) {
    f.run(HardwarePopcount{});
  }
  /// A pass compiled for AVX2 + F16C (run_wide).
  template <class F>
  __attribute__((target("avx2,f16c"))) static void run_avx2(const F& f) {
    f.run();
  }
#endif

  /// BitmapUnique's pass: with POPCNT where the host SIMD paths are on.
  template <class F>
  static void bitmap_unique(const F& f) {
#if MPE_HOST_SIMD
    if (host_simd_enabled()) {
      bitmap_popcnt(f);
      return;
    }
#endif
    PortablePaths::bitmap_unique(f);
  }

  /// A host-only pass (`f.run()`, always inline) compiled for AVX2 where it is on.
  template <class F>
  static void run_wide(const F& f) {
#if MPE_HOST_SIMD
    if (host_simd_enabled()) {
      run_avx2(f);
      return;
    }
#endif
    f.run();
  }

  /// Whether pool_range pools bags of Storage now (the SIMD paths are on and Storage has a
  /// decoder).
  template <class Storage>
  static bool pools_ranges() {
#if MPE_HOST_SIMD
    if constexpr (simd::has_row<Storage>) return host_simd_enabled();
#endif
    return false;
  }

  /// Bags [j0, j1) of the PoolBags `f` by host_pool::range where pools_ranges (returns
  /// true), else false (the portable loop pools them).
  template <class F>
  static bool pool_range(const F& f, index_t j0, index_t j1) {
#if MPE_HOST_SIMD
    if constexpr (simd::has_row<typename F::storage_type>) {
      if (host_simd_enabled()) {
        host_pool::range(f, j0, j1);
        return true;
      }
    }
#endif
    (void)f;
    (void)j0;
    (void)j1;
    return false;
  }
};

}  // namespace mpe::detail
