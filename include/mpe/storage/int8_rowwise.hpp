// SPDX-License-Identifier: Apache-2.0
/// @file int8_rowwise.hpp
/// @brief `Int8Rowwise` storage: FBGEMM's fused 8-bit row-wise layout.
#pragma once

#include "mpe/storage/storage.hpp"

namespace mpe {

/// Row format (FBGEMM "fused 8-bit row-wise"): D x u8 codes, then f32 scale, then f32
/// bias, D + 8 bytes (scale/bias unaligned when D % 4 != 0, as in FBGEMM).
/// Asymmetric min/max quantization (DESIGN.md): bias = min, scale = (max - min) / 255,
/// q = clamp(Rounding((x - bias) * (255 / (max - min))), 0, 255); x' = scale * q + bias.
/// A constant row stores scale 0 and is exact. Holds finite |x| <= 2^126 (so max - min
/// stays finite).
struct Int8Rowwise {
  static constexpr const char* name = "int8_rowwise";
  static constexpr int bits = 8;
  static constexpr float limit = 0x1p126f;
  static constexpr std::size_t data_bytes(std::int32_t dim) { return static_cast<std::size_t>(dim) + 8; }

  struct Reader {
    const std::uint8_t* row;
    float scale, bias;
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t dim)
        : row(r), scale(num::load_f32(r + dim)), bias(num::load_f32(r + dim + 4)) {}
    MPE_HOST_DEVICE float operator[](std::int32_t d) const {
      return num::add(num::mul(scale, static_cast<float>(row[d])), bias);
    }
  };

  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    bool sat = false;
    float mn, mx;
    detail::sanitized_min_max(src, dim, limit, mn, mx, sat);
    const float range = num::sub(mx, mn);
    float scale = num::div(range, 255.0f);
    if (!(scale > 0.0f)) {  // constant row, or a range too small for a normal scale
      scale = 0.0f;
      for (std::int32_t d = 0; d < dim; ++d) row[d] = 0;
    } else {
      // A range below ~2^-120 makes 255/range overflow (every code would become 255, and
      // x == min would give 0 * inf = NaN): then scale both sides by an exact 2^64 first.
      // pre = 1 otherwise, so ordinary rows keep their bits.
      float pre = 1.0f;
      float inv = num::div(255.0f, range);
      if (!num::is_finite(inv)) {
        pre = 0x1p64f;
        inv = num::div(255.0f, num::mul(range, pre));
      }
      bool ignored = false;
      detail::for_each_element<R>(dim, rng, [&](std::int32_t d, std::uint32_t w) {
        const float x = detail::sanitize(src[d], limit, ignored);
        float q = R::round(num::mul(num::mul(num::sub(x, mn), pre), inv), w);
        q = q < 0.0f ? 0.0f : (q > 255.0f ? 255.0f : q);
        row[d] = static_cast<std::uint8_t>(q);
      });
    }
    num::store_f32(row + dim, scale);
    num::store_f32(row + dim + 4, mn);
    return sat;
  }

  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
