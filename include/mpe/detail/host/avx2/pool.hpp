// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/avx2/pool.hpp
/// @brief Host-only fast path of forward pooling (not public): one bag pooled with AVX2
/// (+F16C for FP16 rows), chosen at run time, with the bits of the portable path.
///
/// The default build stays baseline x86-64: the kernels below carry
/// `__attribute__((target("avx2,f16c")))` and run only where the CPU reports AVX2 and F16C
/// (`__builtin_cpu_supports`, checked once); elsewhere, on other architectures, in device
/// code and with `MPE_NO_HOST_SIMD` defined, the portable `RowAccumulate` loops run instead.
/// nvcc's host pass compiles the fast path too (g++ as host compiler), so a program mixing
/// .cu and .cpp translation units sees one definition of PoolBags on the host.
///
/// Bits (the numerics contract): every element is decoded exactly as `Storage::Reader`
/// defines it and added to its column's accumulator with one correctly rounded add (weighted:
/// one multiply, then one add), rows in index order per column, as the portable loop does:
/// - FP32: the value; Int8: add(mul(scale, float(q)), bias); Int4 and Int2: the same with
///   FP16 scale and bias; BF16: bits << 16 (integer ops).
/// - FP16: `vcvtph2ps` converts every finite and infinite code exactly like
///   num::half_to_float (subnormals included; the conversion ignores MXCSR.DAZ); for NaN
///   codes it sets the quiet bit, so that bit is put back from the code (bit 9 of the
///   code -> bit 22 of the float): all 65,536 codes give the software decode's bits
///   (tests/host/test_pool_simd.cpp checks each one).
/// - No FMA: the target set excludes "fma", so the compiler cannot contract a multiply and
///   an add into one rounding even if -ffp-contract allowed it.
/// - Accumulators start at +0.0f like the portable loop's zeroed output, columns past the
///   last full group of 8 use the portable per-element code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "mpe/numeric/config.hpp"

#if !defined(MPE_NO_HOST_SIMD) && !defined(__CUDA_ARCH__) && defined(__x86_64__) && \
    (defined(__GNUC__) || defined(__clang__))
#define MPE_HOST_SIMD 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define MPE_HOST_SIMD 0
#endif

#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/half.hpp"
#include "mpe/storage/all.hpp"

namespace mpe::detail {

/// Occurrences ahead whose rows the host prefetches in pooling with a cache, populate and
/// the backward (FBGEMM's default distance), and the least store-only pooling uses
/// (pool_rows_ahead).
#ifdef MPE_POOL_PREFETCH_AHEAD
inline constexpr index_t kPoolPrefetchAhead = MPE_POOL_PREFETCH_AHEAD;
#else
inline constexpr index_t kPoolPrefetchAhead = 16;
#endif

/// Prefetches (read, keep in all levels) every 64-byte line of [p, p + bytes) on the host;
/// a no-op in device code. The rows' bits do not depend on it.
///
/// The empty `asm volatile` is needed: GCC's IPA pure-const analysis treats
/// __builtin_prefetch as free of side effects, so a non-inlined caller whose only effects
/// are prefetches (PoolBags::prefetch_row) was found "const" and its calls deleted as dead
/// code at -O1 and above: no prefetch instruction was left in mpe's forward. The volatile
/// asm emits nothing and keeps them.
/// `Write`: prefetch for writing (the lines are about to be stored to). `L2`: a read
/// prefetch into L2 only (`prefetcht1`), for lines read well after it (see PrefetchRead).
template <bool Write = false, bool L2 = false>
MPE_HOST_DEVICE inline void prefetch_lines(const void* p, std::size_t bytes) {
#ifndef __CUDA_ARCH__
  // One prefetch per 64-byte line the bytes touch (no repeated line).
  const char* c = static_cast<const char*>(p);
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(c) & ~std::uintptr_t{63};
  const std::uintptr_t last =
      (reinterpret_cast<std::uintptr_t>(c) + (bytes ? bytes - 1 : 0)) & ~std::uintptr_t{63};
  for (std::uintptr_t a = first; a <= last; a += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(a), Write ? 1 : 0, L2 && !Write ? 2 : 3);
  asm volatile("");
#else
  (void)p;
  (void)bytes;
#endif
}

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

/// The run-time switch of the host SIMD pooling (default: on where the CPU has AVX2 and F16C).
inline bool& host_simd_flag() {
  static bool on = cpu_has_avx2_f16c();
  return on;
}

/// Whether forward pooling uses the AVX2 kernels now.
inline bool host_simd_enabled() { return host_simd_flag(); }

/// Turns the AVX2 pooling on (only where the CPU supports it) or off; returns the previous
/// setting. For tests comparing the two paths; not thread-safe against running forwards.
inline bool set_host_simd(bool on) {
  const bool was = host_simd_flag();
  host_simd_flag() = on && cpu_has_avx2_f16c();
  return was;
}

#define MPE_SIMD_TARGET __attribute__((target("avx2,f16c")))
// Row decoders: inlined always (a decoder left out of line spills pooling's accumulators);
// the trivial constructors of Fp32 / Fp16 / Bf16 rows are not marked, so code built without
// AVX2 (tests) can make those rows.
#define MPE_SIMD_ROW [[gnu::always_inline]] MPE_SIMD_TARGET

namespace simd {

/// Decoder of one store row of format S: load8(c) = elements [c, c + 8) as the Reader
/// defines them (8 lanes, exact).
template <class S>
struct Row;

template <>
struct Row<Fp32> {
  const std::uint8_t* p;
  MPE_SIMD_TARGET Row(const std::uint8_t* r, std::int32_t) : p(r) {}
  /// The same row seen from column c0 (a multiple of 8): load8(c) reads columns c0 + c.
  MPE_SIMD_ROW Row at(std::int32_t c0) const { return Row(p + 4 * static_cast<std::size_t>(c0), 0); }
  MPE_SIMD_ROW __m256 load8(std::int32_t c) const {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p + 4 * static_cast<std::size_t>(c)));
  }
};

template <>
struct Row<Fp16> {
  const std::uint8_t* p;
  MPE_SIMD_TARGET Row(const std::uint8_t* r, std::int32_t) : p(r) {}
  MPE_SIMD_ROW Row at(std::int32_t c0) const { return Row(p + 2 * static_cast<std::size_t>(c0), 0); }
  MPE_SIMD_ROW __m256 load8(std::int32_t c) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * static_cast<std::size_t>(c)));
    const __m256i hw = _mm256_castps_si256(_mm256_cvtph_ps(h));
    // NaN codes: the hardware sets the quiet bit; take bit 22 from the code's bit 9.
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x7fff)), _mm256_set1_epi32(0x7c00));
    const __m256i q = _mm256_and_si256(nan, _mm256_set1_epi32(0x400000));
    const __m256i want = _mm256_and_si256(_mm256_slli_epi32(h32, 13), q);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_andnot_si256(q, hw), want));
  }
};

template <>
struct Row<Bf16> {
  const std::uint8_t* p;
  MPE_SIMD_TARGET Row(const std::uint8_t* r, std::int32_t) : p(r) {}
  MPE_SIMD_ROW Row at(std::int32_t c0) const { return Row(p + 2 * static_cast<std::size_t>(c0), 0); }
  MPE_SIMD_ROW __m256 load8(std::int32_t c) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * static_cast<std::size_t>(c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

template <>
struct Row<Int8Rowwise> {
  const std::uint8_t* p;
  __m256 scale, bias;
  MPE_SIMD_ROW Row(const std::uint8_t* r, std::int32_t D)
      : p(r), scale(_mm256_set1_ps(num::load_f32(r + D))), bias(_mm256_set1_ps(num::load_f32(r + D + 4))) {}
  MPE_SIMD_ROW Row at(std::int32_t c0) const {
    Row r = *this;
    r.p += c0;
    return r;
  }
  MPE_SIMD_ROW __m256 load8(std::int32_t c) const {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + c));
    const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
    return _mm256_add_ps(_mm256_mul_ps(scale, x), bias);
  }
};

/// INT4 and INT2 row-wise (FBGEMM's fused N-bit rows, N = S::bits): add(mul(scale,
/// float(q)), bias) with FP16 scale and bias after the ceil(D / (8 / N)) code bytes, element d
/// in bits [N (d % (8 / N)), + N) of byte d / (8 / N), the lowest bits first.
template <FusedNbitStorage S>
struct Row<S> {
  static constexpr int kBits = S::bits;       ///< bits per code
  static constexpr int kPerByte = 8 / kBits;  ///< codes per byte
  const std::uint8_t* p;
  __m256 scale, bias;
  /// Scale and bias by vcvtph2ps, exact for every code but a signalling NaN, which it
  /// returns quieted where the software decode keeps it signalling. Both are only operands
  /// of load8's multiply and add, whose result is that quiet NaN either way (x86 returns
  /// its first NaN operand, quieted), so no branch to the software decode: a call there makes
  /// GCC keep the AVX-512 kernel's accumulators in memory instead of registers.
  /// Where the add meets two NaNs (a NaN bias with a NaN scale, or with an infinite scale
  /// times 0) the payload is not promised (docs/numerics.md, section 5), as before.
  MPE_SIMD_ROW Row(const std::uint8_t* r, std::int32_t D) : p(r) {
    // One 32-bit load: the FP16 scale, then the FP16 bias (x86 is little-endian).
    const __m128 sbf = _mm_cvtph_ps(_mm_loadu_si32(r + (D + kPerByte - 1) / kPerByte));  // scale, bias, 0, 0
    scale = _mm256_broadcastss_ps(sbf);
    bias = _mm256_broadcastss_ps(_mm_movehdup_ps(sbf));
  }
  /// c0 a multiple of kPerByte (the kernels' column groups start at multiples of 8).
  MPE_SIMD_ROW Row at(std::int32_t c0) const {
    Row r = *this;
    r.p += c0 / kPerByte;
    return r;
  }
  MPE_SIMD_ROW __m256 load8(std::int32_t c) const {
    // Elements c .. c+7 (c a multiple of kPerByte) are the 8 codes of the kBits bytes at
    // c / kPerByte, code k in bits [kBits k, + kBits) of their little-endian word.
    std::uint32_t w = 0;
    __builtin_memcpy(&w, p + c / kPerByte, kBits);
    const __m256i v = _mm256_srlv_epi32(
        _mm256_set1_epi32(static_cast<int>(w)),
        _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits));
    const __m256 x = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32((1 << kBits) - 1)));
    return _mm256_add_ps(_mm256_mul_ps(scale, x), bias);
  }
};

/// Stores r.load8(c) to out[0 .. 8) (lets code built without AVX2 test the decoders).
template <class R>
MPE_SIMD_TARGET void store8(float* out, const R& r, std::int32_t c) {
  _mm256_storeu_ps(out, r.load8(c));
}

/// Formats with an AVX2 decoder.
template <class S>
inline constexpr bool has_row = false;
template <>
inline constexpr bool has_row<Fp32> = true;
template <>
inline constexpr bool has_row<Fp16> = true;
template <>
inline constexpr bool has_row<Bf16> = true;
template <>
inline constexpr bool has_row<Int8Rowwise> = true;
template <>
inline constexpr bool has_row<Int4Rowwise> = true;
template <>
inline constexpr bool has_row<Int2Rowwise> = true;

/// Prefetch points of one row of `last` + 1 bytes at p: p + last, and p + 64 k for
/// k < lines - 1; `f(address)` is called for each. With lines = row_lines(...) every 64-byte
/// line the row touches gets one (the points p + 64 k step one line each, the last byte's
/// line ends it). `Lines` > 0: that many points in straight-line code; 0: `lines` at run time.
template <std::int32_t Lines, class F>
[[gnu::always_inline]] inline void for_row_lines(const std::uint8_t* p, std::int32_t lines, std::size_t last,
                                                 F&& f) {
  f(p + last);
  if constexpr (Lines > 0) {
    for (std::int32_t k = 0; k + 1 < Lines; ++k) f(p + 64 * static_cast<std::size_t>(k));
  } else {
    for (std::int32_t k = 0; k + 1 < lines; ++k) f(p + 64 * static_cast<std::size_t>(k));
  }
}

/// A read prefetch of a row that pooling reads from one row array (the store, or the FP32
/// cache rows of an all-cached bag): `prefetcht1` (into L2, not L1). Pooling keeps many rows
/// in flight (pool_rows_ahead); L1 prefetches of that many lines would occupy L1's few miss
/// buffers and stall the loop's own loads, while L2 has room for them. Inlined always: a
/// separate function holding only prefetches is "const" to GCC's IPA and its calls are
/// deleted (see prefetch_lines).
struct PrefetchRead {
  [[gnu::always_inline]] inline void operator()(const std::uint8_t* a) const { __builtin_prefetch(a, 0, 2); }
};

/// Prefetches (read, into L2: PrefetchRead) the points of for_row_lines; host only.
template <std::int32_t Lines>
[[gnu::always_inline]] inline void prefetch_row_lines(const std::uint8_t* p, std::int32_t lines,
                                                      std::size_t last) {
  for_row_lines<Lines>(p, lines, last, PrefetchRead{});
}

/// Prefetch points per row for prefetch_row_lines: the most 64-byte lines a row of `bytes`
/// bytes can touch, ceil((bytes + 64 - g) / 64), where g (a power of two, at most 64) divides
/// the store's address and the stride, so every row starts g-aligned, at most 64 - g bytes
/// into a line. 64-byte aligned rows: ceil(bytes / 64); FBGEMM-style INT8 rows of D = 64
/// (72 bytes at a 72-byte stride, g = 8): 2, not 3 (a 72-byte row never straddles 3 lines).
inline std::int32_t row_lines(const std::uint8_t* store, std::size_t stride, std::size_t bytes) {
  const std::size_t a = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(store)) | stride | 64;
  const std::size_t g = a & (~a + 1);  // lowest set bit: the largest power of two dividing both (<= 64)
  return static_cast<std::int32_t>((bytes + 64 - g + 63) / 64);
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

/// Address of row r (stride bytes) of `store`, only to prefetch: computed as an integer, so
/// a row index of -1 (an uncached occurrence of the FP32 cache-row source, PoolBags) gives
/// an address that is never read, not an out-of-range pointer.
[[gnu::always_inline]] inline const std::uint8_t* prefetch_address(const std::uint8_t* store, index_t r,
                                                                   std::size_t stride) {
  return reinterpret_cast<const std::uint8_t*>(reinterpret_cast<std::uintptr_t>(store) +
                                               static_cast<std::uintptr_t>(r) * stride);
}

/// Row source of store-only pooling: occurrence i reads store row rows[i]. The first pass
/// over a bag prefetches the row `dist` occurrences ahead (prefetch_row_lines).
struct StoreRows {
  static constexpr bool may_be_cached = false;
  const std::uint8_t* store;
  std::size_t stride;
  std::size_t bytes;  ///< data bytes of a row (> 0)
  const index_t* rows;
  index_t n;           ///< occurrences of the whole batch (prefetches stop at the last)
  std::int32_t lines;  ///< row_lines(store, stride, bytes)
  index_t dist;        ///< occurrences ahead prefetched: pool_rows_ahead(lines)
  /// The source of rows[0 .. n) of `store`, with its prefetch points and distance.
  static StoreRows of(const std::uint8_t* store, std::size_t stride, std::size_t bytes, const index_t* rows,
                      index_t n) {
    const std::int32_t lines = row_lines(store, stride, bytes);
    return StoreRows{store, stride, bytes, rows, n, lines, pool_rows_ahead(lines)};
  }
  [[gnu::always_inline]] inline const std::uint8_t* row(index_t i, bool& cached) const {
    cached = false;
    return store + static_cast<std::size_t>(rows[i]) * stride;
  }
  [[gnu::always_inline]] inline void ahead(index_t i) const {
    if (i + dist < n)
      prefetch_row_lines<0>(prefetch_address(store, rows[i + dist], stride), lines, bytes - 1);
  }
  /// One past the last occurrence before `end` whose row `dist` ahead lies in the batch:
  /// the end of a bag's prefetching loop.
  [[gnu::always_inline]] inline index_t prefetch_stop(index_t end) const {
    return end < n - dist ? end : n - dist;
  }
};

/// Row source from two callables: row(i, cached) and ahead(i) (pooling with a cache).
template <class RowFn, class AheadFn>
struct FnRows {
  static constexpr bool may_be_cached = true;
  RowFn row_fn;
  AheadFn ahead_fn;
  [[gnu::always_inline]] inline const std::uint8_t* row(index_t i, bool& cached) const {
    return row_fn(i, cached);
  }
  [[gnu::always_inline]] inline void ahead(index_t i) const { ahead_fn(i); }
};

/// Elements [c, c + 8) of a row of format S for pooling, where the first operation on each
/// lane is a multiply or add: for Fp16 the hardware conversion alone, whose NaN lanes
/// differ from num::half_to_float only in the quiet bit, which that first IEEE operation
/// sets either way (a NaN operand is returned quieted, so quiet(x) is all of x that
/// reaches the result); every other format: Row<S>::load8 (exact).
template <class S>
MPE_SIMD_TARGET inline __m256 load8_for_arith(const Row<S>& r, std::int32_t c) {
  if constexpr (std::is_same_v<S, Fp16>) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(r.p + 2 * static_cast<std::size_t>(c))));
  } else {
    return r.load8(c);
  }
}

/// One pooling step on elements [c, c + 8) of a row of format S, as pool_columns does it:
/// out[k] = acc[k] + x (weighted: acc[k] + w * x) with x from load8_for_arith. Lets tests
/// (compiled without AVX2) check the fast decode through the operations that consume it.
template <class S>
MPE_SIMD_TARGET void pool_step8(float* out, const std::uint8_t* row, std::int32_t D, std::int32_t c,
                                const float* acc, float w, bool weighted) {
  const Row<S> r(row, D);
  __m256 x = load8_for_arith<S>(r, c);
  if (weighted) x = _mm256_mul_ps(_mm256_set1_ps(w), x);
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(acc), x));
}

/// acc[v] += x (weighted: w * x) for x = columns [c0 + 8 v, + 8) of one row of format R.
template <class R, bool Weighted, int NV>
[[gnu::always_inline]] MPE_SIMD_TARGET inline void add_row(__m256 (&acc)[NV], const std::uint8_t* row,
                                                           std::int32_t D, std::int32_t c0, __m256 w) {
  const Row<R> r = Row<R>(row, D).at(c0);  // constant offsets below: one address register
  for (int v = 0; v < NV; ++v) {
    __m256 x = load8_for_arith<R>(r, 8 * v);
    if constexpr (Weighted) x = _mm256_mul_ps(w, x);
    acc[v] = _mm256_add_ps(acc[v], x);
  }
}

/// Store-only rows [i, stop) of a bag into acc, each after prefetching the row src.dist
/// occurrences ahead (prefetch_row_lines<Lines>); returns the first row
/// not pooled (stop, or i when i >= stop).
template <class S, bool Weighted, int NV, std::int32_t Lines>
[[gnu::always_inline]] MPE_SIMD_TARGET inline index_t prefetched_rows(__m256 (&acc)[NV], const StoreRows& src,
                                                                      index_t i, index_t stop,
                                                                      const float* weights, std::int32_t D,
                                                                      std::int32_t c0) {
  const std::uint8_t* const store = src.store;
  const std::size_t stride = src.stride;
  const index_t* const rows = src.rows;
  const std::int32_t lines = src.lines;
  const std::size_t last = src.bytes - 1;
  const index_t dist = src.dist;
  __m256 w = _mm256_setzero_ps();
  for (; i < stop; ++i) {
    prefetch_row_lines<Lines>(prefetch_address(store, rows[i + dist], stride), lines, last);
    if constexpr (Weighted) w = _mm256_set1_ps(weights[i]);
    add_row<S, Weighted, NV>(acc, store + static_cast<std::size_t>(rows[i]) * stride, D, c0, w);
  }
  return i;
}

/// Straight-line copies of the prefetching loop exist for 1 .. kUnrolledLines points.
inline constexpr std::int32_t kUnrolledLines = 5;

/// prefetched_rows with Lines = src.lines where that is at most L, else the run-time count
/// (Lines = 0): one test of the count per bag, none per row.
template <class S, bool Weighted, int NV, std::int32_t L = kUnrolledLines>
[[gnu::always_inline]] MPE_SIMD_TARGET inline index_t prefetched_rows_for(__m256 (&acc)[NV],
                                                                          const StoreRows& src, index_t i,
                                                                          index_t stop, const float* weights,
                                                                          std::int32_t D, std::int32_t c0) {
  if constexpr (L == 0) {
    return prefetched_rows<S, Weighted, NV, 0>(acc, src, i, stop, weights, D, c0);
  } else {
    if (src.lines == L) return prefetched_rows<S, Weighted, NV, L>(acc, src, i, stop, weights, D, c0);
    return prefetched_rows_for<S, Weighted, NV, L - 1>(acc, src, i, stop, weights, D, c0);
  }
}

/// acc[v] = 0 and o[8 v, + 8) = acc[v] for every v < NV, in straight-line code: as loops,
/// GCC turns the stores into a memcpy from the accumulators, which then live on the stack
/// and are zeroed by `rep stos` (a third of pooling's time with one row per bag).
template <std::size_t... V>
MPE_SIMD_ROW inline void zero_acc(__m256* acc, std::index_sequence<V...>) {
  ((acc[V] = _mm256_setzero_ps()), ...);
}
template <std::size_t... V>
MPE_SIMD_ROW inline void store_acc(float* o, const __m256* acc, std::index_sequence<V...>) {
  (_mm256_storeu_ps(o + 8 * V, acc[V]), ...);
}

/// Columns [c0, c0 + 8 NV) of one bag: accumulators in registers over the bag's rows in
/// index order. StoreRows: occurrence i reads store row rows[i], and with `Prefetch` the
/// row src.dist occurrences ahead is prefetched first (a loop with prefetches,
/// then one without, so the per-row work is the prefetch points, the row's address and its
/// loads and adds). FnRows: `src.row(i, cached)` gives the row (an FP32 cache row when
/// cached) and, with `Prefetch`, `src.ahead(i)` is called first.
template <class S, bool Weighted, int NV, bool Prefetch, class Src>
MPE_SIMD_TARGET inline void pool_columns(const Src& src, index_t begin, index_t end, const float* weights,
                                         std::int32_t D, std::int32_t c0, float* o) {
  __m256 acc[NV];
  zero_acc(acc, std::make_index_sequence<NV>{});
  __m256 w = _mm256_setzero_ps();
  if constexpr (!Src::may_be_cached) {
    const std::uint8_t* const store = src.store;
    const std::size_t stride = src.stride;
    const index_t* const rows = src.rows;
    index_t i = begin;
    if constexpr (Prefetch) {
      // The loop with prefetches, one copy per common number of prefetch points (no branch
      // on it per row); then the bag's last rows, whose rows ahead lie past the batch.
      const index_t stop = src.prefetch_stop(end);
      i = prefetched_rows_for<S, Weighted, NV>(acc, src, i, stop, weights, D, c0);
    }
    for (; i < end; ++i) {
      if constexpr (Weighted) w = _mm256_set1_ps(weights[i]);
      add_row<S, Weighted, NV>(acc, store + static_cast<std::size_t>(rows[i]) * stride, D, c0, w);
    }
  } else {
    for (index_t i = begin; i < end; ++i) {
      if constexpr (Prefetch) src.ahead(i);
      bool cached = false;
      const std::uint8_t* row = src.row(i, cached);
      if constexpr (Weighted) w = _mm256_set1_ps(weights[i]);
      if (cached) {
        add_row<Fp32, Weighted, NV>(acc, row, D, c0, w);
      } else {
        add_row<S, Weighted, NV>(acc, row, D, c0, w);
      }
    }
  }
  store_acc(o + c0, acc, std::make_index_sequence<NV>{});
}

/// pool_columns for NV = nv (1 .. 8) groups of 8 columns.
template <class S, bool Weighted, bool Prefetch, class Src>
MPE_SIMD_TARGET inline void pool_groups(std::int32_t nv, const Src& src, index_t begin, index_t end,
                                        const float* weights, std::int32_t D, std::int32_t c0, float* o) {
  switch (nv) {
    case 8:
      pool_columns<S, Weighted, 8, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 7:
      pool_columns<S, Weighted, 7, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 6:
      pool_columns<S, Weighted, 6, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 5:
      pool_columns<S, Weighted, 5, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 4:
      pool_columns<S, Weighted, 4, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 3:
      pool_columns<S, Weighted, 3, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    case 2:
      pool_columns<S, Weighted, 2, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
    default:
      pool_columns<S, Weighted, 1, Prefetch>(src, begin, end, weights, D, c0, o);
      break;
  }
}

/// Sum (weighted: sum of w * x) of occurrences [begin, end) into o (D), columns in groups of
/// up to 64 (8 registers) plus a scalar tail (the Reader's per-element code). The first
/// pass over the rows prefetches ahead (StoreRows: prefetched_rows in the column groups,
/// src.ahead in the scalar tail when D < 8; FnRows: src.ahead), the others find the rows
/// in L1/L2.
template <class S, bool Weighted, class Src>
MPE_SIMD_TARGET void pool_bag(const Src& src, index_t begin, index_t end, const float* weights,
                              std::int32_t D, float* o) {
  const std::int32_t full = D / 8;  // whole groups of 8 columns
  bool first = true;
  for (std::int32_t g = 0; g < full; g += 8) {
    const std::int32_t nv = full - g < 8 ? full - g : 8;
    if (first) {
      pool_groups<S, Weighted, true>(nv, src, begin, end, weights, D, 8 * g, o);
    } else {
      pool_groups<S, Weighted, false>(nv, src, begin, end, weights, D, 8 * g, o);
    }
    first = false;
  }
  const std::int32_t t0 = 8 * full;
  if (t0 == D) return;
  for (std::int32_t d = t0; d < D; ++d) o[d] = 0.0f;
  for (index_t i = begin; i < end; ++i) {
    if (first) src.ahead(i);
    bool cached = false;
    const std::uint8_t* row = src.row(i, cached);
    const float w = Weighted ? weights[i] : 1.0f;
    if (Src::may_be_cached && cached) {
      for (std::int32_t d = t0; d < D; ++d) {
        const float x = num::load_f32(row + 4 * static_cast<std::size_t>(d));
        o[d] = Weighted ? num::add(o[d], num::mul(w, x)) : num::add(o[d], x);
      }
    } else {
      const typename S::Reader rd(row, D);
      for (std::int32_t d = t0; d < D; ++d) {
        const float x = rd[d];
        o[d] = Weighted ? num::add(o[d], num::mul(w, x)) : num::add(o[d], x);
      }
    }
  }
}

/// One row of format S at `row` into the D floats at o as a one-row bag: add(0, x), weighted
/// add(0, mul(w, x)), for each element x (pool_bag's operations on a bag of one row: groups
/// of 8 by load8_for_arith, the rest by the Reader, or FP32 loads for S = Fp32).
template <class S, bool Weighted>
[[gnu::always_inline]] MPE_SIMD_TARGET inline void single_row(const std::uint8_t* row, std::int32_t D,
                                                              float w, float* o) {
  const Row<S> r(row, D);
  const __m256 wv = _mm256_set1_ps(w), zero = _mm256_setzero_ps();
  std::int32_t c = 0;
  for (; c + 8 <= D; c += 8) {
    __m256 x = load8_for_arith<S>(r, c);
    if constexpr (Weighted) x = _mm256_mul_ps(wv, x);
    _mm256_storeu_ps(o + c, _mm256_add_ps(zero, x));
  }
  if (c == D) return;
  const typename S::Reader rd(row, D);
  for (; c < D; ++c) {
    const float x = rd[c];
    o[c] = Weighted ? num::add(0.0f, num::mul(w, x)) : num::add(0.0f, x);
  }
}

/// simd512::pool_single_rows's AVX2 twin (hosts without AVX-512), on the same row sources:
/// `count` bags of one row each, bag k's row occurrence i0 + k of `src` and its output
/// o + k * o_stride; each element what pool_bag gives a bag of one row, bit for bit.
template <class S, bool Weighted, class Src>
MPE_SIMD_TARGET void pool_single_rows(const Src& src, index_t i0, index_t count, const float* weights,
                                      std::int32_t D, float* o, std::size_t o_stride) {
  float w = 1.0f;
  for (index_t k = 0; k < count; ++k) {
    const index_t i = i0 + k;
    src.ahead(i);
    if constexpr (Weighted) w = weights[i];
    bool cached = false;
    const std::uint8_t* row = src.row(i, cached);
    float* out = o + static_cast<std::size_t>(k) * o_stride;
    if (Src::may_be_cached && cached) {
      single_row<Fp32, Weighted>(row, D, w, out);
    } else {
      single_row<S, Weighted>(row, D, w, out);
    }
  }
}

/// Decodes one store row of format S (has_row<S>) into D floats at dst: the Reader's values,
/// bit for bit (8-column groups by Row<S>::load8, which is exact, the rest by the Reader;
/// NaN payloads where two NaNs meet in the decode's add are not promised, docs/numerics.md).
/// A cache fill. Pinned by tests/host/test_pool_simd.cpp.
///
/// `Stream`: where dst is 32-byte aligned, the 8-column groups are written with
/// non-temporal stores (`vmovntps`): no read for ownership of the destination lines and no
/// cache pollution, the same values. They are weakly ordered: the calling thread reads them
/// back as usual, but another thread may only after the writer's `_mm_sfence` (the caller's
/// duty; AdmitSet::run_fused issues it once at its end).
template <class S, bool Stream = false>
MPE_SIMD_TARGET void decode_row(const std::uint8_t* src, std::int32_t D, float* dst) {
  const Row<S> r(src, D);
  std::int32_t c = 0;
  if (Stream && (reinterpret_cast<std::uintptr_t>(dst) & 31) == 0) {
    for (; c + 8 <= D; c += 8) _mm256_stream_ps(dst + c, r.load8(c));
  }
  for (; c + 8 <= D; c += 8) _mm256_storeu_ps(dst + c, r.load8(c));
  if (c < D) {
    const typename S::Reader rd(src, D);
    for (; c < D; ++c) dst[c] = rd[c];
  }
}

/// Index of the first of the n 64-bit words at `p` equal to `v`, or -1; four per compare.
template <class T>
MPE_SIMD_TARGET inline std::int32_t find_equal64(const T* p, std::int32_t n, T v) {
  static_assert(sizeof(T) == 8);
  const __m256i want = _mm256_set1_epi64x(static_cast<long long>(v));
  std::int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    const int m = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x, want)));
    if (m != 0) return i + __builtin_ctz(static_cast<unsigned>(m));
  }
  for (; i < n; ++i) {
    if (p[i] == v) return i;
  }
  return -1;
}

/// First of the `ways` tags at `tags` equal to `row`, or -1: CacheRef::find_in_set's scan,
/// four tags per compare.
MPE_SIMD_TARGET inline std::int32_t find_tag(const std::int64_t* tags, std::int32_t ways, std::int64_t row) {
  return find_equal64(tags, ways, row);
}

/// The smallest of the n >= 1 keys at `key`, all below 2^63 (SetVictims' packed keys and
/// its mark of a slot handed out), four keys per compare.
MPE_SIMD_TARGET inline std::uint64_t min_key(const std::uint64_t* key, std::int32_t n) {
  std::int32_t k = 0;
  std::uint64_t m = key[0];
  if (n >= 4) {
    __m256i best = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key));
    for (k = 4; k + 4 <= n; k += 4) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key + k));
      best = _mm256_blendv_epi8(best, v, _mm256_cmpgt_epi64(best, v));  // signed: keys < 2^63
    }
    alignas(32) std::uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), best);
    m = lanes[0];
    for (int l = 1; l < 4; ++l) m = lanes[l] < m ? lanes[l] : m;
  }
  for (; k < n; ++k) m = key[k] < m ? key[k] : m;
  return m;
}

}  // namespace simd

#undef MPE_SIMD_ROW
#undef MPE_SIMD_TARGET

#else  // !MPE_HOST_SIMD

inline bool host_simd_enabled() { return false; }
inline bool set_host_simd(bool) { return false; }

#endif

}  // namespace mpe::detail
