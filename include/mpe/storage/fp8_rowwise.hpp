// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/fp8_rowwise.hpp
/// @brief `Fp8E4M3Rowwise` and `Fp8E5M2Rowwise` storage: D FP8 codes and a per-row f32
/// scale, D + 4 bytes a row; with the FP32 <-> FP8 conversions they need.
///
/// The two 8-bit floating-point formats are those of the OCP "8-bit Floating Point
/// Specification (OFP8)", revision 1.0 (Open Compute Project, 2023):
///   - E4M3 ("E4M3FN"): sign, 4 exponent bits (bias 7), 3 mantissa bits. No infinities;
///     S.1111.111 (0x7F / 0xFF) is NaN; largest normal 1.75 x 2^8 = 448, smallest normal
///     2^-6, subnormals m x 2^-9 (m = 1..7).
///   - E5M2: IEEE-754-like, sign, 5 exponent bits (bias 15), 2 mantissa bits. S.11111.00
///     is infinity, S.11111.{01,10,11} NaN; largest normal 1.75 x 2^15 = 57344, smallest
///     normal 2^-14, subnormals m x 2^-16 (m = 1..3).
/// The encoder is written like num::float_to_half (half.hpp): the value is scaled exactly
/// by a power of two so that one unit is one FP8 ulp at its binade (subnormals included),
/// rounded with the Rounding policy, scaled back and its bits read off. Every float
/// operation goes through num::mul/div, so host and device give the same bits.
#pragma once

#include <cfloat>

#include "mpe/numeric/half.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

namespace num {

/// OCP FP8 E4M3 ("E4M3FN"): 3 mantissa bits, exponent bias 7, no infinities. A code is
/// S.EEEE.MMM (sign bit 7, exponent bits 6..3, mantissa bits 2..0).
struct Fp8E4M3 {
  static constexpr const char* name = "e4m3";     ///< short name of the format
  static constexpr int mant_bits = 3;             ///< mantissa (fraction) bits
  static constexpr int exp_bits = 4;              ///< exponent bits
  static constexpr int bias = 7;                  ///< exponent bias: a normal code is 1.M x 2^(E - 7)
  static constexpr int min_exp = -6;              ///< smallest normal exponent (2^-6)
  static constexpr float max = 448.0f;            ///< largest finite value, 0x7E: S.1111.110
  static constexpr std::uint8_t max_code = 0x7e;  ///< code of the largest finite magnitude
  static constexpr bool has_inf = false;          ///< no infinities: S.1111.111 is the only NaN
};

/// OCP FP8 E5M2: 2 mantissa bits, exponent bias 15, IEEE-style infinities and NaNs. A
/// code is S.EEEEE.MM (sign bit 7, exponent bits 6..2, mantissa bits 1..0).
struct Fp8E5M2 {
  static constexpr const char* name = "e5m2";     ///< short name of the format
  static constexpr int mant_bits = 2;             ///< mantissa (fraction) bits
  static constexpr int exp_bits = 5;              ///< exponent bits
  static constexpr int bias = 15;                 ///< exponent bias: a normal code is 1.M x 2^(E - 15)
  static constexpr int min_exp = -14;             ///< smallest normal exponent (2^-14)
  static constexpr float max = 57344.0f;          ///< largest finite value, 0x7B: S.11110.11
  static constexpr std::uint8_t max_code = 0x7b;  ///< code of the largest finite magnitude
  /// IEEE-style infinities: S.11111.00 is +-Inf, S.11111.{01,10,11} NaN.
  static constexpr bool has_inf = true;
};

/// Result of a narrowing FP8 conversion: the code and whether the value had to be clamped
/// to the format's finite range (or was not finite).
struct Fp8Result {
  std::uint8_t bits;  ///< the FP8 code
  bool saturated;     ///< true when the input was NaN, +-Inf or rounded beyond +-F::max
};

/// FP8 code -> float (exact). E4M3's NaN codes give a quiet NaN (0x7FC00000 with the
/// code's sign), E5M2's infinities +-Inf and its NaN codes an f32 NaN whose top mantissa
/// bits are the code's (S.11111.01 gives the signalling pattern 0x7FA00000 with the sign).
/// Stored rows never hold NaN or infinity codes.
template <class F>
MPE_HOST_DEVICE inline float fp8_to_float(std::uint8_t c) {
  const std::uint32_t sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  const std::uint32_t mmask = (1u << F::mant_bits) - 1u;
  const std::uint32_t emask = (1u << F::exp_bits) - 1u;
  const std::uint32_t e = (static_cast<std::uint32_t>(c) >> F::mant_bits) & emask;
  const std::uint32_t m = c & mmask;
  if constexpr (F::has_inf) {
    if (e == emask) return bits_float(sign | 0x7f800000u | (m << (23 - F::mant_bits)));
  } else {
    if (e == emask && m == mmask) return bits_float(sign | 0x7fc00000u);
  }
  if (e == 0) {  // subnormal (or zero): m units of 2^(min_exp - mant_bits), exact
    const float v = mul(static_cast<float>(m), pow2(F::min_exp - F::mant_bits));
    return bits_float(float_bits(v) | sign);
  }
  return bits_float(sign | ((e - static_cast<std::uint32_t>(F::bias) + 127u) << 23) |
                    (m << (23 - F::mant_bits)));
}

/// Exactly representable FP8 value -> its code. Precondition: finite, |x| <= F::max and
/// on F's grid (at most mant_bits + 1 significant bits, a multiple of the subnormal unit).
template <class F>
MPE_HOST_DEVICE inline std::uint8_t fp8_bits_exact(float x) {
  const std::uint32_t fb = float_bits(x);
  const std::uint32_t sign = (fb >> 24) & 0x80u;
  const std::uint32_t a = fb & 0x7fffffffu;
  if (a == 0) return static_cast<std::uint8_t>(sign);
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= F::min_exp) {
    const std::uint32_t m = (a >> (23 - F::mant_bits)) & ((1u << F::mant_bits) - 1u);
    return static_cast<std::uint8_t>(sign | (static_cast<std::uint32_t>(e + F::bias) << F::mant_bits) | m);
  }
  // subnormal: an integer number of units (exact product)
  return static_cast<std::uint8_t>(
      sign | static_cast<std::uint32_t>(mul(bits_float(a), pow2(F::mant_bits - F::min_exp))));
}

/// Round a float to FP8 format F with policy R. `random_word` feeds stochastic rounding
/// (ignored otherwise). A result beyond +-F::max is clamped to +-F::max (the code of the
/// largest finite value; never a NaN or infinity code) and sets `saturated`; NaN input
/// gives +0 and +-Inf +-F::max, both with `saturated`.
template <class F, class R>
MPE_HOST_DEVICE inline Fp8Result float_to_fp8(float x, std::uint32_t random_word = 0) {
  const std::uint8_t top_pos = F::max_code, top_neg = static_cast<std::uint8_t>(0x80u | F::max_code);
  if (!is_finite(x)) {
    if ((float_bits(x) & 0x007fffffu) != 0) return {0, true};  // NaN
    return {(float_bits(x) >> 31) ? top_neg : top_pos, true};
  }
  const float r = detail::round_to_format<R>(x, F::mant_bits, F::min_exp, random_word);
  if (bits_float(float_bits(r) & 0x7fffffffu) > F::max)
    return {(float_bits(r) >> 31) ? top_neg : top_pos, true};
  return {fp8_bits_exact<F>(r), false};
}

}  // namespace num

/// Row format "FP8 row-wise": D FP8 codes (format F, one byte each, element d at byte d),
/// then the row's f32 scale (little-endian; unaligned when D % 4 != 0): D + 4 bytes.
/// x' = scale * fp8_to_float(code_d), one num::mul.
///
/// Quantization: scale = max_d |x_d| / F::max (one correctly rounded division), so the
/// row's largest magnitude lands on the top of the FP8 range and the whole FP8 exponent
/// range below it is used; code_d = FP8(x_d / scale) rounded with the Rounding policy.
/// The scale is a plain f32, not a power of two: a power of two would make scale * code
/// exact but leave up to one binade of the FP8 range unused at the top (so up to one more
/// binade of small elements in the subnormals or at zero), for no gain in relative precision
/// (FP8 is a floating-point grid: every binade has the same relative spacing); the two extra
/// f32 roundings (x / scale and scale * code, 2^-24 relative each) are far below an FP8 step
/// (at least 2^-4 relative for E4M3, 2^-3 for E5M2).
///
/// Edges: an all-zero row stores scale 0 and codes 0 (reads back exactly 0). When the
/// rounded scale would read the top code back above `limit` (scale * F::max > FLT_MAX),
/// the f32 just below is taken (a guard: no f32 row reaches it with 448 or 57344). A row
/// with max |x| < F::max x 2^-149 takes the smallest subnormal scale 2^-149 instead of an
/// underflowing one (its elements are then integers of that unit, coded exactly up to the
/// FP8 precision). x / scale can exceed F::max by an f32 rounding (or the scale's own
/// rounding): such codes clamp to the top code +-F::max (within the rounding error bound;
/// not counted as saturation). So no code is ever NaN (E4M3's S.1111.111, E5M2's
/// S.11111.xx) or infinity, and every stored row reads back finite and within +-limit.
///
/// Holds every finite float (`limit` = FLT_MAX); NaN stores 0 and +-Inf +-FLT_MAX, counted
/// as saturated. Error per element: at most half an FP8 step of x / scale (nearest) or one
/// step (stochastic), times scale, plus the f32 roundings; subnormal scales (rows with
/// max |x| < F::max x 2^-126) add absolute errors of order F::max x 2^-149.
///
/// @tparam F the FP8 format of the codes: num::Fp8E4M3 or num::Fp8E5M2.
template <class F>
struct Fp8Rowwise {
  using format = F;  ///< the FP8 format of the codes (num::Fp8E4M3 or num::Fp8E5M2)
  /// Format name (messages, checkpoints): "fp8_e4m3_rowwise" or "fp8_e5m2_rowwise".
  static constexpr const char* name = F::has_inf ? "fp8_e5m2_rowwise" : "fp8_e4m3_rowwise";
  static constexpr int bits = 8;           ///< bits per element (one FP8 code)
  static constexpr float limit = FLT_MAX;  ///< largest magnitude held: every finite float
  /// Bytes of one row before padding: dim codes + 4 (scale).
  static constexpr std::size_t data_bytes(std::int32_t dim) { return static_cast<std::size_t>(dim) + 4; }

  /// Reads element d of a row; the scale is read once, at construction.
  struct Reader {
    const std::uint8_t* row;  ///< first byte of the row: the codes (any alignment)
    float scale;              ///< the row's scale (f32 at byte dim); 0 when the row is all zeros
    /// Views the stored row at `r` of `dim` elements and reads its scale.
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t dim) : row(r), scale(num::load_f32(r + dim)) {}
    /// Element d in [0, dim): `num::mul(scale, num::fp8_to_float<F>(code_d))`, the exact
    /// FP8 value times the scale, one correctly rounded f32 multiplication.
    MPE_HOST_DEVICE float operator[](std::int32_t d) const {
      return num::mul(scale, num::fp8_to_float<F>(row[d]));
    }
  };

  /// Quantizes the `dim` floats of `src` into `row` (data_bytes(dim) bytes) with rounding
  /// policy `R`; `rng` gives the random words of stochastic rounding (one per element,
  /// unused by NearestRounding).
  ///
  /// Each element is first sanitized (NaN -> 0, +-Inf -> +-FLT_MAX). amax = max_d |x_d|;
  /// scale = amax / F::max (f32 division; 2^-149 where it rounds to 0; the f32 just below
  /// where scale * F::max would overflow), or 0 when amax = 0 (then every code is 0);
  /// code_d = num::float_to_fp8<F, R>(x_d / scale), clamped to +-F::max. See the struct
  /// comment for the error bound.
  /// @return true when an element was NaN or infinite and had to be replaced (saturated);
  ///         a code clamped to +-F::max by f32 rounding is not counted.
  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    return store_lanes<R>(src, dim, row, rng, 0, 1);
  }

  /// The part of store() that lane `lane` of `lanes` writes: the codes of its element
  /// groups (num::for_each_element_lanes) and, lane 0, the scale. The row's largest
  /// magnitude is store()'s (detail::sanitized_abs_max_lanes: a warp maximum on a GPU), so
  /// the lanes together write exactly store()'s bytes; returns store()'s flag (the same in every lane).
  template <class R>
  MPE_HOST_DEVICE static bool store_lanes(const float* src, std::int32_t dim, std::uint8_t* row,
                                          const num::RowRng& rng, std::int32_t lane, std::int32_t lanes) {
    bool sat = false;
    const float amax = detail::sanitized_abs_max_lanes(src, dim, limit, sat, lane, lanes);
    float scale = 0.0f;
    if (amax > 0.0f) {
      scale = num::div(amax, F::max);
      if (scale < 0x1p-149f) scale = 0x1p-149f;  // underflow: the smallest subnormal
      // Keep the top code's read-back finite (overflow reads as > limit); the f32 below a
      // positive float is its bit pattern minus one, and one step suffices. A guard: for
      // F::max = 448 and 57344 no f32 amax overflows here (checked over the top binades).
      if (!(num::mul(scale, F::max) <= limit)) scale = num::bits_float(num::float_bits(scale) - 1u);
    }
    if (scale == 0.0f) {
      num::for_each_element_lanes<NearestRounding>(dim, rng, lane, lanes,
                                                   [&](std::int32_t d, std::uint32_t) { row[d] = 0; });
    } else {
      bool ignored = false;
      num::for_each_element_lanes<R>(dim, rng, lane, lanes, [&](std::int32_t d, std::uint32_t w) {
        const float x = detail::sanitize(src[d], limit, ignored);
        // a clamp here is x / scale exceeding F::max by f32 rounding only (see above)
        row[d] = num::float_to_fp8<F, R>(num::div(x, scale), w).bits;
      });
    }
    if (lane == 0) num::store_f32(row + dim, scale);
    return sat;
  }

  /// First element of `src` (dim floats) that the format cannot hold, i.e. the first NaN
  /// or +-Inf, or -1 when every element is finite.
  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

/// D x OCP FP8 E4M3 codes + f32 scale (D + 4 bytes): 3 mantissa bits, 2^-9 .. 448 per row.
using Fp8E4M3Rowwise = Fp8Rowwise<num::Fp8E4M3>;
/// D x OCP FP8 E5M2 codes + f32 scale (D + 4 bytes): 2 mantissa bits, 2^-16 .. 57344 per row.
using Fp8E5M2Rowwise = Fp8Rowwise<num::Fp8E5M2>;

}  // namespace mpe
