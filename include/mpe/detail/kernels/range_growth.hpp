// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/range_growth.hpp
/// @brief The bounded range growth of a store row's optimizer update
/// (EmbeddingConfig::max_range_growth): the box [lo - m, hi + m] around the old row's grid
/// that each new value is clamped into before the row is quantized. Single-source
/// (`MPE_HOST_DEVICE`), used by ApplyRows and ApplyScaledLanes (detail/kernels/update.hpp).
#pragma once

#include <cstdint>

#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/storage/fused_nbit.hpp"
#include "mpe/storage/int8_rowwise.hpp"

namespace mpe::detail {

/// Whether a storage format stores each row on an affine grid of its own, `scale * q +
/// bias` for codes q in [0, top] with the scale and bias in the row's header (its Reader's
/// `scale` and `bias`): Int8Rowwise (top 255) and the fused N-bit formats Int4Rowwise (15)
/// and Int2Rowwise (3). Only these take EmbeddingConfig::max_range_growth > 0.
template <class Storage>
struct RowGrid {
  static constexpr bool affine = false;  ///< no per-row affine grid
  static constexpr float top = 0.0f;     ///< unused
};
/// Int8Rowwise: f32 scale and bias, codes 0..255.
template <>
struct RowGrid<Int8Rowwise> {
  static constexpr bool affine = true;  ///< bias + scale * q, q in [0, 255]
  static constexpr float top = 255.0f;  ///< the largest code
};
/// The fused N-bit formats (Int4Rowwise, Int2Rowwise): FP16 scale and bias, codes 0..2^N - 1.
template <FusedNbitStorage Storage>
struct RowGrid<Storage> {
  static constexpr bool affine = true;                                        ///< bias + scale * q
  static constexpr float top = static_cast<float>((1 << Storage::bits) - 1);  ///< the largest code
};

/// The box a store row's new values are clamped into (`on` false: no clamp).
struct RangeBox {
  float lo = 0.0f, hi = 0.0f;  ///< the box's ends (lo - m, hi + m of the old grid)
  bool on = false;             ///< whether to clamp
  /// x clamped into [lo, hi] (NaN, which an update never is, passes through).
  MPE_HOST_DEVICE float operator()(float x) const { return x < lo ? lo : (x > hi ? hi : x); }
};

/// The box of a stored row, read through its Reader `rd`, for an update with growth g =
/// EmbeddingConfig::max_range_growth: with the old row's grid ends lo = bias and hi =
/// num::add(num::mul(scale, top), bias) (the values codes 0 and top decode to, from the
/// header as its Reader decodes it) and m = num::mul(g, num::sub(hi, lo)), the box is
/// [num::sub(lo, m), num::add(hi, m)]. Off (no clamp) when g is not > 0, for a format
/// without an affine grid (RowGrid), and for a constant old row (hi == lo: scale 0, or
/// a scale too small to move hi off lo), whose range could never grow otherwise.
template <class Storage>
MPE_HOST_DEVICE inline RangeBox range_box(const typename Storage::Reader& rd, float g) {
  RangeBox b;
  if constexpr (RowGrid<Storage>::affine) {
    if (g > 0.0f) {
      const float lo = rd.bias;
      const float hi = num::add(num::mul(rd.scale, RowGrid<Storage>::top), rd.bias);
      if (hi > lo) {
        const float m = num::mul(g, num::sub(hi, lo));
        b.lo = num::sub(lo, m);
        b.hi = num::add(hi, m);
        b.on = true;
      }
    }
  } else {
    (void)rd;
    (void)g;
  }
  return b;
}

/// range_box of the stored row `row` (D elements), its header decoded here (for a caller
/// without the row's Reader: the laned path). Off for g not > 0 without reading the row.
template <class Storage>
MPE_HOST_DEVICE inline RangeBox range_box(const std::uint8_t* row, std::int32_t D, float g) {
  if constexpr (RowGrid<Storage>::affine) {
    if (g > 0.0f) return range_box<Storage>(typename Storage::Reader(row, D), g);
  } else {
    (void)row;
    (void)D;
    (void)g;
  }
  return RangeBox{};
}

}  // namespace mpe::detail
