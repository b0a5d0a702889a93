// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/int2_rowwise.hpp
/// @brief `Int2Rowwise` storage: FBGEMM's fused N-bit (N = 2) row-wise layout, ceil(D/4)
/// bytes of packed 2-bit codes then FP16 scale and FP16 bias (ceil(D/4) + 4 bytes).
#pragma once

#include "mpe/numeric/half.hpp"
#include "mpe/storage/fused_nbit.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

/// Row format (FBGEMM "fused N-bit row-wise", N = 2: the layout of FBGEMM's
/// `FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef` in src/QuantUtils.cc with bit_rate 2,
/// which writes code q of column `col` into byte col / 4 shifted left by (col % 4) * 2, then
/// the FP16 scale and bias at byte ceil(D/4); see io/interop.hpp), ceil(D/4) + 4 bytes,
/// with nb = ceil(D/4):
///   - bytes [0, nb): the 2-bit codes q_d (0..3), four per byte: element 4i+k in bits
///     2k..2k+1 of byte i (k = 0..3; the unused high bits of the last byte are 0 when D is
///     not a multiple of 4);
///   - bytes [nb, nb + 2): scale (IEEE binary16, little-endian);
///   - bytes [nb + 2, nb + 4): bias (binary16, little-endian).
///
/// The bytes are FBGEMM's; the quantizer is mpe's own (fixed correctly rounded operations
/// and the Rounding policy, docs/numerics.md), so its codes and parameters need not match
/// FBGEMM's bit for bit.
///
/// Quantization (asymmetric min/max, FBGEMM's scheme with FP16 parameters, as
/// Int4Rowwise with 3 in place of 15): bias = min rounded down to FP16, scale = (max -
/// bias) / 3 rounded up to FP16 (so every code lands in [0, 3] before clamping, up to f32
/// rounding), q = clamp(Rounding((x - bias) * (1 / scale)), 0, 3); x' = scale * q + bias.
/// Where bias + 3 * scale would read back above 65504, scale is the FP16 just below instead
/// (the top code clamps to 3; the error stays below one scale), so every stored row reads
/// back within +-65504. A constant row stores scale 0 and bias = nearest FP16 of the value
/// (exact to FP16 rounding). Holds finite |x| <= 65504 (scale and bias must fit FP16).
/// Four levels per row: the quantization step is a third of the row's range.
struct Int2Rowwise {
  static constexpr const char* name = "int2_rowwise";  ///< format name (messages, checkpoints)
  static constexpr int bits = 2;                       ///< bits per element (a quarter byte)
  /// Largest magnitude held: 65504 (num::kHalfMax), the largest finite FP16, since the
  /// scale and bias are FP16.
  static constexpr float limit = num::kHalfMax;
  /// Bytes of one row before padding: ceil(dim / 4) code bytes + 2 (scale) + 2 (bias).
  static constexpr std::size_t data_bytes(std::int32_t dim) {
    return (static_cast<std::size_t>(dim) + 3) / 4 + 4;
  }

  /// Reads element d of a row (element d's code in byte d / 4 at bit 2 * (d mod 4)); the
  /// FP16 scale and bias are decoded to f32 (exactly) once, at construction.
  using Reader = detail::FusedNbitReader<2>;

  /// Quantizes the `dim` floats of `src` into `row` (data_bytes(dim) bytes) with rounding
  /// policy `R` for the codes; `rng` gives the random words of stochastic rounding (one
  /// per element, unused by NearestRounding). The FP16 scale and bias are rounded as
  /// described below, whatever `R`.
  ///
  /// Each element is first sanitized (NaN -> 0, values beyond +-65504, infinities
  /// included, -> +-65504). For min < max: bias = FP16 of min rounded down, scale = FP16
  /// of (max - bias) / 3 rounded up (never below 2^-24, the smallest FP16, even where the
  /// f32 division underflows to 0; one FP16 step lower where bias + 3 * scale would read
  /// back above 65504), q = clamp(R::round((x - bias) * (1 / scale)), 0, 3). For
  /// min == max: scale 0, bias = FP16 of min rounded to nearest, every code 0.
  /// @return true when an element was NaN, infinite or beyond +-65504 and had to be
  ///         replaced (saturated) before quantization; clamping a code to [0, 3] is not
  ///         counted.
  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    return store_lanes<R>(src, dim, row, rng, 0, 1);
  }

  /// The part of store() that lane `lane` of `lanes` writes: the code bytes of its element
  /// groups (num::for_each_element_lanes: four elements, one byte, per group) and, lane 0,
  /// the scale and bias. The row's min and max are store()'s (a warp reduction over the
  /// lanes' own elements on a GPU, detail::sanitized_min_max_lanes), so the lanes together
  /// write exactly store()'s bytes; returns store()'s flag.
  template <class R>
  MPE_HOST_DEVICE static bool store_lanes(const float* src, std::int32_t dim, std::uint8_t* row,
                                          const num::RowRng& rng, std::int32_t lane, std::int32_t lanes) {
    return detail::store_fused_nbit_lanes<2, R>(src, dim, row, rng, lane, lanes, limit);
  }

  /// First element of `src` (dim floats) that Int2Rowwise cannot hold, i.e. the first NaN,
  /// +-Inf or value with |x| > 65504, or -1 when every element fits.
  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
