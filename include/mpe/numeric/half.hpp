// SPDX-License-Identifier: Apache-2.0
/// @file mpe/numeric/half.hpp
/// @brief FP32 <-> IEEE binary16 (FP16) and bfloat16 conversions, usable on host and
/// device, with any rounding policy (nearest-even, stochastic, directed).
///
/// Method: a finite float x is scaled exactly by a power of two so that one unit is one
/// ulp of the target format at x's binade (subnormals included), rounded with the
/// policy, and scaled back (exact). Values past the target's largest finite number
/// saturate to it and report `saturated`; callers count these.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/rounding.hpp"

namespace mpe::num {

/// Result of a narrowing conversion: the target bits and whether the value had to be
/// clamped to the format's finite range (or was not finite).
struct NarrowResult {
  /// The target format's 16-bit pattern (FP16 or BF16; sign in bit 15), ready for
  /// num::store_u16: the rounded value, or the saturated one when `saturated` is set.
  std::uint16_t bits;
  /// True when the input was NaN (bits = +0), +-Inf, or rounded to a magnitude beyond the
  /// format's largest finite value (bits = that value with the input's sign); false when
  /// `bits` is the ordinary rounding of a finite input (underflow to 0 included).
  bool saturated;
};

/// Largest finite FP16 value.
inline constexpr float kHalfMax = 65504.0f;
/// Largest finite BF16 value (0x7F7F).
inline constexpr float kBf16Max = 0x1.FEp127f;

/// Exactly representable FP16 value -> its bits. Precondition: finite, |x| <= 65504 and
/// x a multiple of 2^-24 with at most 11 significant bits.
MPE_HOST_DEVICE inline std::uint16_t half_bits_exact(float x) {
  const std::uint32_t fb = float_bits(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((fb >> 16) & 0x8000u);
  const std::uint32_t a = fb & 0x7fffffffu;
  if (a == 0) return sign;
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= -14) {
    return static_cast<std::uint16_t>(sign | ((e + 15) << 10) | ((a >> 13) & 0x3ffu));
  }
  // FP16 subnormal: an integer number of 2^-24 units (exact product)
  return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(mul(bits_float(a), 0x1p24f)));
}

/// FP16 bits -> float (exact).
MPE_HOST_DEVICE inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float v = mul(static_cast<float>(m), 0x1p-24f);  // exact
    return bits_float(float_bits(v) | sign);
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e - 15 + 127) << 23) | (m << 13));
}

/// BF16 bits -> float (exact).
MPE_HOST_DEVICE inline float bf16_to_float(std::uint16_t h) {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

namespace detail {
/// Round |x| (finite, > 0) to the grid of a format with `mant_bits` stored mantissa bits
/// and minimum normal exponent `min_exp`, using policy R on the magnitude. Exact apart
/// from the one rounding decision.
template <class R>
MPE_HOST_DEVICE inline float round_magnitude(float a, int mant_bits, int min_exp, std::uint32_t random_word) {
  const std::uint32_t ab = float_bits(a);
  int e = static_cast<int>(ab >> 23) - 127;  // float subnormals: e = -127, below min_exp
  if (e < min_exp) e = min_exp;
  const int ulp_exp = e - mant_bits;
  // a * 2^-ulp_exp is exact; split the scaling to stay inside float's normal range
  float v = a;
  int k = -ulp_exp;
  while (k > 100) {
    v = mul(v, pow2(100));
    k -= 100;
  }
  while (k < -100) {
    v = mul(v, pow2(-100));
    k += 100;
  }
  v = mul(v, pow2(k));
  float q = R::round(v, random_word);
  // scale back, exact (q has at most mant_bits + 2 significant bits)
  k = ulp_exp;
  while (k > 100) {
    q = mul(q, pow2(100));
    k -= 100;
  }
  while (k < -100) {
    q = mul(q, pow2(-100));
    k += 100;
  }
  return mul(q, pow2(k));
}

/// Policy R applied to a signed value with a magnitude-based grid. For directed
/// policies the direction is mapped through the sign (down on a negative value rounds
/// its magnitude up).
template <class R>
MPE_HOST_DEVICE inline float round_to_format(float x, int mant_bits, int min_exp, std::uint32_t random_word) {
  const bool neg = (float_bits(x) >> 31) != 0;
  const float a = bits_float(float_bits(x) & 0x7fffffffu);
  if (a == 0.0f) return x;
  float r;
  if constexpr (std::is_same_v<R, mpe::detail::RoundUp>) {
    r = neg ? round_magnitude<mpe::detail::RoundDown>(a, mant_bits, min_exp, random_word)
            : round_magnitude<mpe::detail::RoundUp>(a, mant_bits, min_exp, random_word);
  } else if constexpr (std::is_same_v<R, mpe::detail::RoundDown>) {
    r = neg ? round_magnitude<mpe::detail::RoundUp>(a, mant_bits, min_exp, random_word)
            : round_magnitude<mpe::detail::RoundDown>(a, mant_bits, min_exp, random_word);
  } else {
    r = round_magnitude<R>(a, mant_bits, min_exp, random_word);
  }
  return neg ? bits_float(float_bits(r) | 0x80000000u) : r;
}
}  // namespace detail

/// Round a float to FP16 with policy R. `random_word` feeds stochastic rounding (ignored
/// otherwise). Non-finite input or a result beyond +-65504 saturates to +-65504 (NaN to
/// 0) and sets `saturated`.
template <class R>
MPE_HOST_DEVICE inline NarrowResult float_to_half(float x, std::uint32_t random_word = 0) {
  if (!is_finite(x)) {
    if ((float_bits(x) & 0x007fffffu) != 0) return {0, true};  // NaN
    return {static_cast<std::uint16_t>((float_bits(x) >> 31) ? 0xfbffu : 0x7bffu), true};
  }
  const float r = detail::round_to_format<R>(x, 10, -14, random_word);
  const float ar = bits_float(float_bits(r) & 0x7fffffffu);
  if (ar > kHalfMax) {
    return {static_cast<std::uint16_t>((float_bits(r) >> 31) ? 0xfbffu : 0x7bffu), true};
  }
  return {half_bits_exact(r), false};
}

/// Round a float to the FP16 grid and return it as a float (same rules as float_to_half).
template <class R>
MPE_HOST_DEVICE inline float round_to_half(float x, std::uint32_t random_word = 0) {
  return half_to_float(float_to_half<R>(x, random_word).bits);
}

/// Round a float to BF16 with policy R; saturates like float_to_half at +-kBf16Max.
template <class R>
MPE_HOST_DEVICE inline NarrowResult float_to_bf16(float x, std::uint32_t random_word = 0) {
  if (!is_finite(x)) {
    if ((float_bits(x) & 0x007fffffu) != 0) return {0, true};
    return {static_cast<std::uint16_t>((float_bits(x) >> 31) ? 0xff7fu : 0x7f7fu), true};
  }
  const float r = detail::round_to_format<R>(x, 7, -126, random_word);
  if (!is_finite(r) || bits_float(float_bits(r) & 0x7fffffffu) > kBf16Max) {
    return {static_cast<std::uint16_t>((float_bits(x) >> 31) ? 0xff7fu : 0x7f7fu), true};
  }
  return {static_cast<std::uint16_t>(float_bits(r) >> 16), false};
}

}  // namespace mpe::num
