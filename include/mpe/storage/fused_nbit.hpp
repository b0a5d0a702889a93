// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/fused_nbit.hpp
/// @brief The quantizer shared by the FBGEMM fused N-bit row formats (`Int4Rowwise`,
/// `Int2Rowwise`): FP16 scale and bias after the packed codes.
#pragma once

#include <concepts>
#include <cstdint>

#include "mpe/numeric/half.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe::detail {

/// Reader of an FBGEMM fused N-bit row (N = `Bits`, 2 or 4): element d's code in byte
/// d / (8 / N) at bit N * (d mod (8 / N)); the FP16 scale and bias after the ceil(D / (8 / N))
/// code bytes, decoded to f32 (exactly) once, at construction.
template <int Bits>
struct FusedNbitReader {
  static_assert(Bits == 2 || Bits == 4, "FBGEMM's fused N-bit rows have N = 2 or 4");
  static constexpr std::int32_t kShift = Bits == 4 ? 1 : 2;  ///< log2 of the codes per byte
  const std::uint8_t* row;  ///< first byte of the row: the packed codes (any alignment)
  /// The row's scale (FP16 after the code bytes, as f32): one code step; 0 for a constant row.
  float scale;
  float bias;  ///< the row's bias (FP16 after the scale, as f32): code 0's value
  /// Views the stored row at `r` of `dim` elements and decodes its scale and bias.
  MPE_HOST_DEVICE FusedNbitReader(const std::uint8_t* r, std::int32_t dim) : row(r) {
    const std::int32_t nb = (dim + (1 << kShift) - 1) >> kShift;
    scale = num::half_to_float(num::load_u16(r + nb));
    bias = num::half_to_float(num::load_u16(r + nb + 2));
  }
  /// Element d in [0, dim): its code q_d decoded as `num::add(num::mul(scale, q_d), bias)`,
  /// two correctly rounded f32 operations (no fused multiply-add).
  MPE_HOST_DEVICE float operator[](std::int32_t d) const {
    const std::uint32_t q =
        (static_cast<std::uint32_t>(row[d >> kShift]) >> (Bits * (d & ((1 << kShift) - 1)))) &
        ((1u << Bits) - 1u);
    return num::add(num::mul(scale, static_cast<float>(q)), bias);
  }
};

/// A storage format in FBGEMM's fused N-bit layout (Int4Rowwise, Int2Rowwise): its codes are
/// `S::bits` wide and it reads rows with FusedNbitReader<S::bits>. The host SIMD decoders and
/// the portable pooling loop have one definition for every such format.
template <class S>
concept FusedNbitStorage = requires {
  { S::bits } -> std::convertible_to<int>;
}
&&std::same_as<typename S::Reader, FusedNbitReader<S::bits>>;

/// The FP16 scale and bias of a fused N-bit row (N = `Bits`) whose sanitized minimum is
/// below its maximum, and the inverse scale its codes are computed with (the rule of
/// store_fused_nbit_lanes below; also used by the host's AVX-512 and AVX2 stores,
/// detail/host/avx512/encode.hpp and detail/host/avx2/encode.hpp, and with Bits = 8 by the
/// TBE INT8 export's FP16 scale and bias, io/interop.hpp, so all have one definition).
/// `limit`: the largest value the top code may decode to.
struct FusedNbitScale {
  std::uint16_t scale_h, bias_h;  ///< the FP16 bits written after the codes
  float bias, inv;                ///< bias as f32; 1 / scale (correctly rounded)
};
template <int Bits>
MPE_HOST_DEVICE inline FusedNbitScale fused_nbit_scale(float mn, float mx, float limit) {
  constexpr float kTop = static_cast<float>((1 << Bits) - 1);
  FusedNbitScale p{};
  p.bias_h = num::float_to_half<RoundDown>(mn).bits;
  p.bias = num::half_to_float(p.bias_h);
  p.scale_h = num::float_to_half<RoundUp>(num::div(num::sub(mx, p.bias), kTop)).bits;
  // A range below top * 2^-150 makes the FP32 division underflow to 0: take the smallest
  // FP16 scale (2^-24) instead of 0, whose inverse would turn x == bias into 0 * inf.
  if (p.scale_h == 0) p.scale_h = 1;
  // Keep the largest code inside the format's range (the FP16 grid below a positive half
  // is its bit pattern minus one; top * scale is exact in FP32).
  if (p.scale_h > 1 && num::add(num::mul(num::half_to_float(p.scale_h), kTop), p.bias) > limit) --p.scale_h;
  p.inv = num::div(1.0f, num::half_to_float(p.scale_h));
  return p;
}

/// Writes a fused N-bit row's FP16 scale and bias after its ceil(dim / (8 / Bits)) code
/// bytes (the layout FusedNbitReader reads; shared by the scalar and the host SIMD stores).
template <int Bits>
MPE_HOST_DEVICE inline void store_fused_nbit_params(std::uint8_t* row, std::int32_t dim,
                                                    std::uint16_t scale_h, std::uint16_t bias_h) {
  constexpr std::int32_t kPerByte = 8 / Bits;
  const std::int32_t nb = (dim + kPerByte - 1) / kPerByte;
  num::store_u16(row + nb, scale_h);
  num::store_u16(row + nb + 2, bias_h);
}

/// The part of an N-bit row's store() (N = `Bits`, 2 or 4) that lane `lane` of `lanes`
/// writes: the code bytes of its element groups (num::for_each_element_lanes: four
/// elements per group, so a byte's 8 / N codes never straddle two lanes) and, lane 0, the
/// scale and bias. Layout (FBGEMM's fused N-bit row-wise, e.g.
/// `FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef`): element d in byte d / (8 / N) at bit
/// N * (d mod (8 / N)), then the FP16 scale and FP16 bias at byte ceil(D / (8 / N)).
///
/// Each element is first sanitized (NaN -> 0, beyond +-`limit`, infinities included, ->
/// +-`limit`). With top = 2^N - 1: for min < max, bias = FP16 of min rounded down, scale =
/// FP16 of (max - bias) / top rounded up (never below 2^-24, the smallest FP16, even where
/// the f32 division underflows to 0; one FP16 step lower where bias + top * scale would
/// read back above `limit`), q = clamp(R::round((x - bias) * (1 / scale)), 0, top); for
/// min == max, scale 0, bias = FP16 of min rounded to nearest, every code 0. The row's
/// min and max are the one-lane scan's (sanitized_min_max_lanes: a warp reduction on a GPU),
/// so the lanes together write exactly the one-lane bytes. Returns true when an element had to be sanitized
/// (saturated).
template <int Bits, class R>
MPE_HOST_DEVICE bool store_fused_nbit_lanes(const float* src, std::int32_t dim, std::uint8_t* row,
                                            const num::RowRng& rng, std::int32_t lane, std::int32_t lanes,
                                            float limit) {
  static_assert(Bits == 2 || Bits == 4, "FBGEMM's fused N-bit rows have N = 2 or 4");
  constexpr std::int32_t kPerByte = 8 / Bits;
  constexpr float kTop = static_cast<float>((1 << Bits) - 1);
  bool sat = false;
  float mn, mx;
  sanitized_min_max_lanes(src, dim, limit, mn, mx, sat, lane, lanes);
  std::uint16_t scale_h = 0, bias_h;
  if (mx == mn) {
    bias_h = num::float_to_half<NearestRounding>(mn).bits;
    num::for_each_element_lanes<NearestRounding>(
        dim, rng, lane, lanes, [&](std::int32_t d, std::uint32_t) { row[d / kPerByte] = 0; });
  } else {
    const FusedNbitScale p = fused_nbit_scale<Bits>(mn, mx, limit);
    bias_h = p.bias_h;
    scale_h = p.scale_h;
    const float bias = p.bias, inv = p.inv;
    bool ignored = false;
    // Elements come in increasing order within a group: the first code of a byte sets the
    // byte, the others add their bits.
    num::for_each_element_lanes<R>(dim, rng, lane, lanes, [&](std::int32_t d, std::uint32_t w) {
      const float x = sanitize(src[d], limit, ignored);
      float q = R::round(num::mul(num::sub(x, bias), inv), w);
      q = q < 0.0f ? 0.0f : (q > kTop ? kTop : q);
      const std::int32_t at = d % kPerByte;
      const auto c = static_cast<std::uint8_t>(static_cast<std::uint32_t>(q) << (Bits * at));
      row[d / kPerByte] = at ? static_cast<std::uint8_t>(row[d / kPerByte] | c) : c;
    });
  }
  if (lane == 0) store_fused_nbit_params<Bits>(row, dim, scale_h, bias_h);
  return sat;
}

}  // namespace mpe::detail
