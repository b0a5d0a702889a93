// SPDX-License-Identifier: Apache-2.0
/// @file int4_rowwise.hpp
/// @brief `Int4Rowwise` storage: FBGEMM's fused N-bit (N = 4) row-wise layout.
#pragma once

#include "mpe/numeric/half.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

/// Row format (FBGEMM "fused N-bit row-wise", N = 4): ceil(D/2) bytes of codes, element
/// 2i in the low nibble of byte i and 2i+1 in the high nibble, then f16 scale, then f16
/// bias: ceil(D/2) + 4 bytes.
/// Quantization: bias = min rounded down to FP16, scale = (max - bias) / 15 rounded up to
/// FP16 (so every code lands in [0, 15] before clamping), q = clamp(Rounding((x - bias) /
/// scale), 0, 15); x' = scale * q + bias. Where bias + 15 * scale would read back above
/// 65504, scale is the FP16 just below instead (the top codes clamp to 15; the error stays
/// below one scale), so every stored row reads back within +-65504. A constant row stores scale 0 and bias =
/// nearest FP16 of the value (exact to FP16 rounding). Holds finite |x| <= 65504 (scale and
/// bias must fit FP16).
struct Int4Rowwise {
  static constexpr const char* name = "int4_rowwise";
  static constexpr int bits = 4;
  static constexpr float limit = num::kHalfMax;
  static constexpr std::size_t data_bytes(std::int32_t dim) {
    return (static_cast<std::size_t>(dim) + 1) / 2 + 4;
  }

  struct Reader {
    const std::uint8_t* row;
    float scale, bias;
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t dim) : row(r) {
      const std::int32_t nb = (dim + 1) / 2;
      scale = num::half_to_float(num::load_u16(r + nb));
      bias = num::half_to_float(num::load_u16(r + nb + 2));
    }
    MPE_HOST_DEVICE float operator[](std::int32_t d) const {
      const std::uint8_t b = row[d >> 1];
      const std::uint32_t q = (d & 1) ? (b >> 4) : (b & 0xfu);
      return num::add(num::mul(scale, static_cast<float>(q)), bias);
    }
  };

  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    bool sat = false;
    float mn, mx;
    detail::sanitized_min_max(src, dim, limit, mn, mx, sat);
    const std::int32_t nb = (dim + 1) / 2;
    for (std::int32_t i = 0; i < nb; ++i) row[i] = 0;
    std::uint16_t scale_h = 0, bias_h;
    if (mx == mn) {
      bias_h = num::float_to_half<NearestRounding>(mn).bits;
    } else {
      bias_h = num::float_to_half<mpe::detail::RoundDown>(mn).bits;
      const float bias = num::half_to_float(bias_h);
      scale_h = num::float_to_half<mpe::detail::RoundUp>(num::div(num::sub(mx, bias), 15.0f)).bits;
      // A range below 15 * 2^-150 makes the FP32 division underflow to 0: take the smallest
      // FP16 scale (2^-24) instead of 0, whose inverse would turn x == bias into 0 * inf.
      if (scale_h == 0) scale_h = 1;
      // Keep the largest code inside the format's range (the FP16 grid below a positive
      // half is its bit pattern minus one; 15 * scale is exact in FP32).
      if (scale_h > 1 && num::add(num::mul(num::half_to_float(scale_h), 15.0f), bias) > limit) --scale_h;
      const float inv = num::div(1.0f, num::half_to_float(scale_h));
      bool ignored = false;
      detail::for_each_element<R>(dim, rng, [&](std::int32_t d, std::uint32_t w) {
        const float x = detail::sanitize(src[d], limit, ignored);
        float q = R::round(num::mul(num::sub(x, bias), inv), w);
        q = q < 0.0f ? 0.0f : (q > 15.0f ? 15.0f : q);
        const std::uint8_t c = static_cast<std::uint8_t>(q);
        row[d >> 1] = static_cast<std::uint8_t>(row[d >> 1] | ((d & 1) ? (c << 4) : c));
      });
    }
    num::store_u16(row + nb, scale_h);
    num::store_u16(row + nb + 2, bias_h);
    return sat;
  }

  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
