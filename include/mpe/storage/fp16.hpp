// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/fp16.hpp
/// @brief `Fp16` storage: D x IEEE binary16, 2D bytes.
#pragma once

#include "mpe/numeric/half.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

/// Row format D x f16 (IEEE binary16, little-endian), 2D bytes. Each element is rounded
/// with the Rounding policy (stochastic rounding lets updates smaller than half an ulp
/// survive on average). Holds |x| <= 65504; larger values are rejected by set_weights
/// and saturate (counted) in training.
struct Fp16 {
  static constexpr const char* name = "fp16";  ///< format name (messages, checkpoints)
  static constexpr int bits = 16;              ///< bits per element (one binary16)
  /// Largest magnitude held: 65504 (num::kHalfMax), FP16's largest finite value.
  static constexpr float limit = num::kHalfMax;
  /// Bytes of one row before padding: 2 * dim (element d at bytes [2d, 2d + 2)).
  static constexpr std::size_t data_bytes(std::int32_t dim) { return 2 * static_cast<std::size_t>(dim); }

  /// Reads element d of a row (no per-row parameters: nothing is decoded at construction).
  struct Reader {
    const std::uint8_t* row;  ///< first byte of the row (any alignment; read with memcpy)
    /// Views the stored row at `r`; `dim` is unused (no parameters after the data).
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t /*dim*/) : row(r) {}
    /// Element d in [0, dim): the binary16 at bytes [2d, 2d + 2) widened to f32 exactly
    /// (num::half_to_float; subnormals and signed zeros included).
    MPE_HOST_DEVICE float operator[](std::int32_t d) const {
      return num::half_to_float(num::load_u16(row + 2 * d));
    }
  };

  /// Rounds the `dim` floats of `src` to FP16 into `row` (data_bytes(dim) bytes) with
  /// rounding policy `R` (num::float_to_half); `rng` gives the random words of stochastic
  /// rounding (one per element, unused by NearestRounding).
  ///
  /// Each element is rounded once, on the FP16 grid of its binade: 11 significant bits,
  /// ulp 2^(e - 10) for 2^e <= |x| < 2^(e + 1), e >= -14, and a fixed step 2^-24 below
  /// 2^-14 (subnormals). NearestRounding is round-to-nearest-even; StochasticRounding
  /// rounds the magnitude up with probability equal to the fraction of an ulp. The sign
  /// is kept (-0 stays -0); magnitudes that round to 0 underflow silently (not counted).
  /// NaN is stored as +0 and +-Inf as +-65504; a finite x whose rounded magnitude exceeds
  /// 65504 is stored as +-65504 (with nearest rounding: |x| >= 65520; a value in
  /// (65504, 65520) rounds to 65504 and is not counted).
  /// @return true when an element was NaN, infinite or rounded beyond +-65504 and had to
  ///         be saturated.
  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    return store_lanes<R>(src, dim, row, rng, 0, 1);
  }
  /// The part of store() that lane `lane` of `lanes` writes: the elements of its element
  /// groups (num::for_each_element_lanes); returns whether one of them saturated (store()'s
  /// flag is the OR over the lanes).
  template <class R>
  MPE_HOST_DEVICE static bool store_lanes(const float* src, std::int32_t dim, std::uint8_t* row,
                                          const num::RowRng& rng, std::int32_t lane, std::int32_t lanes) {
    bool sat = false;
    num::for_each_element_lanes<R>(dim, rng, lane, lanes, [&](std::int32_t d, std::uint32_t w) {
      const num::NarrowResult h = num::float_to_half<R>(src[d], w);
      sat = sat || h.saturated;
      num::store_u16(row + 2 * d, h.bits);
    });
    return sat;
  }

  /// First element of `src` (dim floats) that Fp16 cannot hold, i.e. the first NaN,
  /// +-Inf or value with |x| > 65504, or -1 when every element fits. Finite values within
  /// range are accepted even when they are not exactly representable (store rounds them).
  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
