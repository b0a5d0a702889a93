// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/bf16.hpp
/// @brief `Bf16` storage: D x bfloat16, 2D bytes.
#pragma once

#include "mpe/numeric/half.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

/// Row format D x bfloat16 (the top 16 bits of an f32), 2D bytes. FP32's range with 8
/// significant bits.
struct Bf16 {
  static constexpr const char* name = "bf16";  ///< format name (messages, checkpoints)
  static constexpr int bits = 16;              ///< bits per element (one bfloat16)
  /// Largest magnitude held: num::kBf16Max = 0x1.FEp127 (about 3.3895e38, bits 0x7F7F),
  /// BF16's largest finite value, slightly below FLT_MAX.
  static constexpr float limit = num::kBf16Max;
  /// Bytes of one row before padding: 2 * dim (element d at bytes [2d, 2d + 2)).
  static constexpr std::size_t data_bytes(std::int32_t dim) { return 2 * static_cast<std::size_t>(dim); }

  /// Reads element d of a row (no per-row parameters: nothing is decoded at construction).
  struct Reader {
    const std::uint8_t* row;  ///< first byte of the row (any alignment; read with memcpy)
    /// Views the stored row at `r`; `dim` is unused (no parameters after the data).
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t /*dim*/) : row(r) {}
    /// Element d in [0, dim): the bfloat16 at bytes [2d, 2d + 2) as the high half of an
    /// f32 with a zero low half (num::bf16_to_float; exact).
    MPE_HOST_DEVICE float operator[](std::int32_t d) const {
      return num::bf16_to_float(num::load_u16(row + 2 * d));
    }
  };

  /// Rounds the `dim` floats of `src` to BF16 into `row` (data_bytes(dim) bytes) with
  /// rounding policy `R` (num::float_to_bf16); `rng` gives the random words of stochastic
  /// rounding (one per element, unused by NearestRounding).
  ///
  /// Each element is rounded once (not truncated) on the BF16 grid of its binade: 8
  /// significant bits, ulp 2^(e - 7) for 2^e <= |x| < 2^(e + 1), e >= -126, and a fixed
  /// step 2^-133 below 2^-126 (subnormals). NearestRounding is round-to-nearest-even;
  /// StochasticRounding rounds the magnitude up with probability equal to the fraction of
  /// an ulp. The sign is kept (-0 stays -0); magnitudes that round to 0 underflow silently
  /// (not counted). NaN is stored as +0 and +-Inf as +-kBf16Max; a finite x whose rounded
  /// magnitude exceeds kBf16Max (or rounds to infinity) is stored as +-kBf16Max.
  /// @return true when an element was NaN, infinite or rounded beyond +-kBf16Max and had
  ///         to be saturated.
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
      const num::NarrowResult h = num::float_to_bf16<R>(src[d], w);
      sat = sat || h.saturated;
      num::store_u16(row + 2 * d, h.bits);
    });
    return sat;
  }

  /// First element of `src` (dim floats) that Bf16 cannot hold, i.e. the first NaN,
  /// +-Inf or value with |x| > kBf16Max (0x1.FEp127), or -1 when every element fits.
  /// Finite values within range are accepted even when they are not exactly representable
  /// (store rounds them).
  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
