// SPDX-License-Identifier: Apache-2.0
/// @file fp16.hpp
/// @brief `Fp16` and `Bf16` storage: D x IEEE binary16 (or bfloat16), 2D bytes.
#pragma once

#include "mpe/numeric/half.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

/// Row format D x f16 (IEEE binary16, little-endian), 2D bytes. Each element is rounded
/// with the Rounding policy (stochastic rounding lets updates smaller than half an ulp
/// survive on average). Holds |x| <= 65504; larger values are rejected by set_weights
/// and saturate (counted) in training.
struct Fp16 {
  static constexpr const char* name = "fp16";
  static constexpr int bits = 16;
  static constexpr float limit = num::kHalfMax;
  static constexpr std::size_t data_bytes(std::int32_t dim) { return 2 * static_cast<std::size_t>(dim); }

  struct Reader {
    const std::uint8_t* row;
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t /*dim*/) : row(r) {}
    MPE_HOST_DEVICE float operator[](std::int32_t d) const {
      return num::half_to_float(num::load_u16(row + 2 * d));
    }
  };

  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    bool sat = false;
    detail::for_each_element<R>(dim, rng, [&](std::int32_t d, std::uint32_t w) {
      const num::NarrowResult h = num::float_to_half<R>(src[d], w);
      sat = sat || h.saturated;
      num::store_u16(row + 2 * d, h.bits);
    });
    return sat;
  }

  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

/// Row format D x bfloat16 (the top 16 bits of an f32), 2D bytes. FP32's range with 8
/// significant bits.
struct Bf16 {
  static constexpr const char* name = "bf16";
  static constexpr int bits = 16;
  static constexpr float limit = num::kBf16Max;
  static constexpr std::size_t data_bytes(std::int32_t dim) { return 2 * static_cast<std::size_t>(dim); }

  struct Reader {
    const std::uint8_t* row;
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t /*dim*/) : row(r) {}
    MPE_HOST_DEVICE float operator[](std::int32_t d) const {
      return num::bf16_to_float(num::load_u16(row + 2 * d));
    }
  };

  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    bool sat = false;
    detail::for_each_element<R>(dim, rng, [&](std::int32_t d, std::uint32_t w) {
      const num::NarrowResult h = num::float_to_bf16<R>(src[d], w);
      sat = sat || h.saturated;
      num::store_u16(row + 2 * d, h.bits);
    });
    return sat;
  }

  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
