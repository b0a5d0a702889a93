// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/common/decode8.hpp
/// @brief The 8-lane row decoders shared by the host's AVX2 and AVX-512 code (not public):
/// `simd::Row<S>` (AVX2 + F16C), which the AVX2 kernels pool and fill with and the AVX-512
/// INT4 / INT2 decoders use for their code tables. Included by detail/host/dispatch.hpp where
/// MPE_HOST_SIMD holds; x86-64 with GCC or Clang only.
///
/// Bits (the numerics contract): every element is decoded exactly as `Storage::Reader`
/// defines it:
/// - FP32: the value; Int8: add(mul(scale, float(q)), bias); Int4 and Int2: the same with
///   FP16 scale and bias; BF16: bits << 16 (integer ops).
/// - FP16: `vcvtph2ps` converts every finite and infinite code exactly like
///   num::half_to_float (subnormals included; the conversion ignores MXCSR.DAZ); for NaN
///   codes it sets the quiet bit, so that bit is put back from the code (bit 9 of the
///   code -> bit 22 of the float): all 65,536 codes give the software decode's bits
///   (tests/host/test_pool_simd.cpp checks each one).
/// - No FMA: the target set excludes "fma", so the compiler cannot contract a multiply and
///   an add into one rounding even if -ffp-contract allowed it.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/half.hpp"
#include "mpe/storage/all.hpp"

#define MPE_SIMD_TARGET __attribute__((target("avx2,f16c")))
// Row decoders: inlined always (a decoder left out of line spills pooling's accumulators);
// the trivial constructors of Fp32 / Fp16 / Bf16 rows are not marked, so code built without
// AVX2 (tests) can make those rows.
#define MPE_SIMD_ROW [[gnu::always_inline]] MPE_SIMD_TARGET

namespace mpe::detail::simd {

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

}  // namespace mpe::detail::simd

#undef MPE_SIMD_ROW
#undef MPE_SIMD_TARGET
