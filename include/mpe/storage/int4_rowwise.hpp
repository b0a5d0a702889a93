// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/int4_rowwise.hpp
/// @brief `Int4Rowwise` storage: FBGEMM's fused N-bit (N = 4) row-wise layout, ceil(D/2)
/// bytes of packed 4-bit codes then FP16 scale and FP16 bias (ceil(D/2) + 4 bytes).
#pragma once

#include "mpe/numeric/half.hpp"
#include "mpe/storage/fused_nbit.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

/// Row format (FBGEMM "fused N-bit row-wise", N = 4: the layout of FBGEMM's
/// `FloatToFusedNBitRowwiseQuantizedSBHalf` with bit_rate 4; see io/interop.hpp),
/// ceil(D/2) + 4 bytes, with nb = ceil(D/2):
///   - bytes [0, nb): the 4-bit codes q_d (0..15), two per byte: element 2i in the low
///     nibble of byte i, element 2i+1 in the high nibble (for odd D the last high nibble
///     is 0);
///   - bytes [nb, nb + 2): scale (IEEE binary16, little-endian);
///   - bytes [nb + 2, nb + 4): bias (binary16, little-endian).
///
/// The bytes are FBGEMM's; the quantizer is mpe's own (fixed correctly rounded operations
/// and the Rounding policy, docs/numerics.md), so its codes and parameters need not match
/// FBGEMM's bit for bit.
///
/// Quantization (asymmetric min/max, FBGEMM's scheme with FP16 parameters): bias = min
/// rounded down to FP16, scale = (max - bias) / 15 rounded up to FP16 (so every code lands
/// in [0, 15] before clamping, up to f32 rounding),
/// q = clamp(Rounding((x - bias) * (1 / scale)), 0, 15); x' = scale * q + bias. Where
/// bias + 15 * scale would read back above 65504, scale is the FP16 just below instead (the
/// top codes clamp to 15; the error stays below one scale), so every stored row reads back
/// within +-65504. A constant row stores scale 0 and bias = nearest FP16 of the value
/// (exact to FP16 rounding). Holds finite |x| <= 65504 (scale and bias must fit FP16).
struct Int4Rowwise {
  static constexpr const char* name = "int4_rowwise";  ///< format name (messages, checkpoints)
  static constexpr int bits = 4;                       ///< bits per element (one nibble)
  /// Largest magnitude held: 65504 (num::kHalfMax), the largest finite FP16, since the
  /// scale and bias are FP16.
  static constexpr float limit = num::kHalfMax;
  /// Bytes of one row before padding: ceil(dim / 2) code bytes + 2 (scale) + 2 (bias).
  static constexpr std::size_t data_bytes(std::int32_t dim) {
    return (static_cast<std::size_t>(dim) + 1) / 2 + 4;
  }

  /// Reads element d of a row (element d's code in byte d / 2 at bit 4 * (d mod 2)); the
  /// FP16 scale and bias are decoded to f32 (exactly) once, at construction.
  using Reader = detail::FusedNbitReader<4>;

  /// Quantizes the `dim` floats of `src` into `row` (data_bytes(dim) bytes) with rounding
  /// policy `R` for the codes; `rng` gives the random words of stochastic rounding (one
  /// per element, unused by NearestRounding). The FP16 scale and bias are rounded as
  /// described below, whatever `R`.
  ///
  /// Each element is first sanitized (NaN -> 0, values beyond +-65504, infinities
  /// included, -> +-65504). For min < max: bias = FP16 of min rounded down, scale = FP16
  /// of (max - bias) / 15 rounded up (never below 2^-24, the smallest FP16, even where the
  /// f32 division underflows to 0; one FP16 step lower where bias + 15 * scale would read
  /// back above 65504),
  /// q = clamp(R::round((x - bias) * (1 / scale)), 0, 15). For min == max: scale 0, bias
  /// = FP16 of min rounded to nearest, every code 0.
  /// @return true when an element was NaN, infinite or beyond +-65504 and had to be
  ///         replaced (saturated) before quantization; clamping a code to [0, 15] is not
  ///         counted.
  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    return store_lanes<R>(src, dim, row, rng, 0, 1);
  }

  /// The part of store() that lane `lane` of `lanes` writes: the code bytes of its element
  /// groups (num::for_each_element_lanes: four elements, two bytes, per group) and, lane 0,
  /// the scale and bias. The row's min and max are store()'s (a warp reduction over the
  /// lanes' own elements on a GPU, detail::sanitized_min_max_lanes), so the lanes together
  /// write exactly store()'s bytes; returns store()'s flag.
  template <class R>
  MPE_HOST_DEVICE static bool store_lanes(const float* src, std::int32_t dim, std::uint8_t* row,
                                          const num::RowRng& rng, std::int32_t lane, std::int32_t lanes) {
    return detail::store_fused_nbit_lanes<4, R>(src, dim, row, rng, lane, lanes, limit);
  }

  /// First element of `src` (dim floats) that Int4Rowwise cannot hold, i.e. the first NaN,
  /// +-Inf or value with |x| > 65504, or -1 when every element fits.
  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
