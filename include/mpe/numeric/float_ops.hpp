// SPDX-License-Identifier: Apache-2.0
/// @file mpe/numeric/float_ops.hpp
/// @brief Correctly rounded float helpers of the numerics contract (docs/numerics.md).
///
/// Every float operation in mpe's per-item code goes through these helpers so that
/// host (g++, contraction off) and device (explicit `_rn` intrinsics, which nvcc never
/// contracts) round identically. Each is a single IEEE-754 binary32 operation,
/// round-to-nearest-even.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "mpe/numeric/config.hpp"

namespace mpe::num {

/// a * b, correctly rounded.
MPE_HOST_DEVICE inline float mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// a + b, correctly rounded.
MPE_HOST_DEVICE inline float add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// a - b, correctly rounded.
MPE_HOST_DEVICE inline float sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

/// a * b + c with a single rounding.
MPE_HOST_DEVICE inline float fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// a / b, correctly rounded.
MPE_HOST_DEVICE inline float div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// sqrt(a), correctly rounded.
MPE_HOST_DEVICE inline float sqrt(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

/// The bits of a float (declared early for floor()).
MPE_HOST_DEVICE inline std::uint32_t float_bits(float x);
MPE_HOST_DEVICE inline float bits_float(std::uint32_t u);

/// floor(a): exact on both sides (signed zeros and NaN preserved). The host version
/// avoids a libm call on baseline x86-64 (no SSE4.1 roundss).
MPE_HOST_DEVICE inline float floor(float a) {
#ifdef __CUDA_ARCH__
  return floorf(a);
#else
  if (!(a > -0x1p23f && a < 0x1p23f)) return a;                      // already integral, +-Inf or NaN
  const float t = static_cast<float>(static_cast<std::int32_t>(a));  // toward zero, exact
  const float r = t > a ? t - 1.0f : t;
  if (r == 0.0f) return bits_float(float_bits(a) & 0x80000000u);  // keep the sign of zero
  return r;
#endif
}

/// The bits of a float.
MPE_HOST_DEVICE inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

/// The float with the given bits.
MPE_HOST_DEVICE inline float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// True when x is neither NaN nor +-Inf (by bits, so it holds under any flags).
MPE_HOST_DEVICE inline bool is_finite(float x) { return (float_bits(x) & 0x7f800000u) != 0x7f800000u; }

/// 2^k as a float, exact for -126 <= k <= 127.
MPE_HOST_DEVICE inline float pow2(int k) { return bits_float(static_cast<std::uint32_t>(k + 127) << 23); }

/// Round to the nearest integer, ties to even, for the default (round-to-nearest-even)
/// floating-point mode the numerics contract assumes. For |a| < 2^23, (|a| + 2^23) - 2^23
/// rounds |a| to an integer in the sum's last place (ties to even) and subtracts exactly;
/// larger values are integers already. Branch-free on the hot path; signed zeros kept.
MPE_HOST_DEVICE inline float rint_even(float a) {
  const std::uint32_t sign = float_bits(a) & 0x80000000u;
  const float mag = bits_float(float_bits(a) & 0x7fffffffu);
  if (!(mag < 0x1p23f)) return a;  // integral already, +-Inf or NaN
  const float r = sub(add(mag, 0x1p23f), 0x1p23f);
  return bits_float(float_bits(r) | sign);
}

// Device code: an aligned address is accessed with one 2- or 4-byte load or store, any
// other with explicit byte accesses. (A memcpy fallback beside the aligned branch is not
// safe there: nvcc 13 -O3 merged the two stores of store_f32 into one 4-byte store without
// the alignment test, a misaligned-address fault on a row whose scale sits at an odd byte;
// the loads were merged into byte loads, losing the aligned path.)

/// Load a float from possibly unaligned bytes (row formats put scale/bias after the data).
/// In device code an aligned address is read with one 4-byte load, any other byte by byte.
MPE_HOST_DEVICE inline float load_f32(const std::uint8_t* p) {
#ifdef __CUDA_ARCH__
  if ((reinterpret_cast<std::uintptr_t>(p) & 3u) == 0) return *reinterpret_cast<const float*>(p);
  return __uint_as_float(static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24);
#else
  float x;
  std::memcpy(&x, p, sizeof x);
  return x;
#endif
}

/// Store a float to possibly unaligned bytes (in device code one 4-byte store where
/// aligned, else four byte stores).
MPE_HOST_DEVICE inline void store_f32(std::uint8_t* p, float x) {
#ifdef __CUDA_ARCH__
  if ((reinterpret_cast<std::uintptr_t>(p) & 3u) == 0) {
    *reinterpret_cast<float*>(p) = x;
    return;
  }
  const std::uint32_t b = __float_as_uint(x);
  p[0] = static_cast<std::uint8_t>(b);
  p[1] = static_cast<std::uint8_t>(b >> 8);
  p[2] = static_cast<std::uint8_t>(b >> 16);
  p[3] = static_cast<std::uint8_t>(b >> 24);
#else
  std::memcpy(p, &x, sizeof x);
#endif
}

/// Load a 16-bit value from possibly unaligned bytes (little-endian host and device; in
/// device code one 2-byte load where aligned, else two byte loads).
MPE_HOST_DEVICE inline std::uint16_t load_u16(const std::uint8_t* p) {
#ifdef __CUDA_ARCH__
  if ((reinterpret_cast<std::uintptr_t>(p) & 1u) == 0) return *reinterpret_cast<const std::uint16_t*>(p);
  return static_cast<std::uint16_t>(p[0] | p[1] << 8);
#else
  std::uint16_t x;
  std::memcpy(&x, p, sizeof x);
  return x;
#endif
}

/// Store a 16-bit value to possibly unaligned bytes (in device code one 2-byte store where
/// aligned, else two byte stores).
MPE_HOST_DEVICE inline void store_u16(std::uint8_t* p, std::uint16_t x) {
#ifdef __CUDA_ARCH__
  if ((reinterpret_cast<std::uintptr_t>(p) & 1u) == 0) {
    *reinterpret_cast<std::uint16_t*>(p) = x;
    return;
  }
  p[0] = static_cast<std::uint8_t>(x);
  p[1] = static_cast<std::uint8_t>(x >> 8);
#else
  std::memcpy(p, &x, sizeof x);
#endif
}

}  // namespace mpe::num
