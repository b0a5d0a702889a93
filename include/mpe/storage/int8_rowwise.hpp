// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/int8_rowwise.hpp
/// @brief `Int8Rowwise` storage: FBGEMM's fused 8-bit row-wise layout, D x u8 codes then
/// f32 scale and f32 bias (D + 8 bytes).
#pragma once

#include "mpe/storage/storage.hpp"

namespace mpe {

namespace detail {
/// The step and inverse of an Int8Rowwise row whose sanitized range `max - min` is
/// `range` (>= 0): the rule of Int8Rowwise::store_lanes, also used by the host's AVX-512 and
/// AVX2 stores (detail/host/avx512/encode.hpp, detail/host/avx2/encode.hpp), so all have one
/// definition.
struct Int8Scale {
  float scale;  ///< range / 255 (f32 division): written after the codes; 0 for a constant row
  float pre;    ///< 2^64 when 255 / range overflows (range below about 2^-120), else 1
  float inv;    ///< 255 / (range * pre): the codes are R::round((x - min) * pre * inv)
};
MPE_HOST_DEVICE inline Int8Scale int8_scale(float range) {
  Int8Scale p{num::div(range, 255.0f), 1.0f, 0.0f};
  if (!(p.scale > 0.0f)) {  // the scale rounded to 0 (range below 2^-142): every code is 0
    p.scale = 0.0f;
    return p;
  }
  // A range below ~2^-120 makes 255/range overflow (every code would become 255, and
  // x == min would give 0 * inf = NaN): then scale both sides by an exact 2^64 first.
  // pre = 1 otherwise, so ordinary rows keep their bits.
  p.inv = num::div(255.0f, range);
  if (!num::is_finite(p.inv)) {
    p.pre = 0x1p64f;
    p.inv = num::div(255.0f, num::mul(range, p.pre));
  }
  return p;
}
}  // namespace detail

/// Row format (FBGEMM "fused 8-bit row-wise": the layout FBGEMM's
/// `FloatOrHalfToFused8BitRowwiseQuantizedSBFloat` writes on the CPU; fbgemm_gpu's CUDA op
/// pads the codes to a multiple of 4, see io/interop.hpp), D + 8 bytes:
///   - bytes [0, D): code q_d of element d (u8, 0..255), one byte each;
///   - bytes [D, D + 4): scale (f32, little-endian);
///   - bytes [D + 4, D + 8): bias (f32, little-endian).
///
/// scale/bias are unaligned when D % 4 != 0, as in FBGEMM. The bytes are FBGEMM's; the
/// quantizer is mpe's own (fixed correctly rounded operations and the Rounding policy,
/// docs/numerics.md), so its codes need not match FBGEMM's bit for bit.
///
/// Asymmetric min/max quantization, FBGEMM's scheme: bias = min, scale = (max - min) / 255,
/// q = clamp(Rounding((x - bias) * (255 / (max - min))), 0, 255); x' = scale * q + bias.
/// A constant row stores scale 0 and is exact. Holds finite |x| <= 2^126 (so max - min
/// stays finite).
struct Int8Rowwise {
  static constexpr const char* name = "int8_rowwise";  ///< format name (messages, checkpoints)
  static constexpr int bits = 8;                       ///< bits per element (one u8 code)
  /// Largest magnitude held: 2^126, so that max - min <= 2^127 is a finite f32.
  static constexpr float limit = 0x1p126f;
  /// Bytes of one row before padding: dim codes + 4 (scale) + 4 (bias).
  static constexpr std::size_t data_bytes(std::int32_t dim) { return static_cast<std::size_t>(dim) + 8; }

  /// Reads element d of a row; the scale and bias are decoded once, at construction.
  struct Reader {
    const std::uint8_t* row;  ///< first byte of the row: the codes (any alignment)
    /// The row's scale (f32 at byte dim): one code step, 0 for a constant row.
    float scale, bias;  ///< the row's bias (f32 at byte dim + 4): the value of code 0, the row's minimum
    /// Views the stored row at `r` of `dim` elements and reads its scale and bias.
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t dim)
        : row(r), scale(num::load_f32(r + dim)), bias(num::load_f32(r + dim + 4)) {}
    /// Element d in [0, dim): `num::add(num::mul(scale, q_d), bias)`, two correctly rounded
    /// f32 operations (no fused multiply-add).
    MPE_HOST_DEVICE float operator[](std::int32_t d) const {
      return num::add(num::mul(scale, static_cast<float>(row[d])), bias);
    }
  };

  /// Quantizes the `dim` floats of `src` into `row` (data_bytes(dim) bytes) with rounding
  /// policy `R`; `rng` gives the random words of stochastic rounding (one per element,
  /// unused by NearestRounding).
  ///
  /// Each element is first sanitized (NaN -> 0, values beyond +-limit, infinities
  /// included, -> +-limit). min and max of the sanitized row give bias = min and
  /// scale = (max - min) / 255 (f32 division); the codes are
  /// q = clamp(R::round((x - min) * (255 / (max - min))), 0, 255). When 255 / (max - min)
  /// overflows (max - min below about 2^-120), both factors are scaled by 2^64 first
  /// (exact), so such rows still use the whole code range. When the scale rounds to 0 (a
  /// constant row, or max - min < 2^-142) every code is 0 and the row reads back as min.
  /// @return true when an element was NaN, infinite or beyond +-limit and had to be
  ///         replaced (saturated) before quantization; clamping a code to [0, 255] is
  ///         not counted.
  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& rng) {
    return store_lanes<R>(src, dim, row, rng, 0, 1);
  }

  /// The part of store() that lane `lane` of `lanes` writes: the codes of its element
  /// groups (num::for_each_element_lanes: four elements per group, groups lane,
  /// lane + lanes, ...) and, lane 0, the scale and bias. The row's min and max are the ones
  /// store() finds (detail::sanitized_min_max_lanes: a warp reduction on a GPU), so the lanes
  /// together write exactly store()'s bytes; returns store()'s flag (the same in every lane).
  template <class R>
  MPE_HOST_DEVICE static bool store_lanes(const float* src, std::int32_t dim, std::uint8_t* row,
                                          const num::RowRng& rng, std::int32_t lane, std::int32_t lanes) {
    bool sat = false;
    float mn, mx;
    detail::sanitized_min_max_lanes(src, dim, limit, mn, mx, sat, lane, lanes);
    const detail::Int8Scale p = detail::int8_scale(num::sub(mx, mn));
    if (!(p.scale > 0.0f)) {  // a constant row (or a range below 2^-142): every code is 0
      num::for_each_element_lanes<NearestRounding>(dim, rng, lane, lanes,
                                                   [&](std::int32_t d, std::uint32_t) { row[d] = 0; });
    } else {
      bool ignored = false;
      // In device code a whole group of four codes at a 4-byte-aligned row is written as one
      // little-endian 32-bit word (a warp's groups: one 128-byte store where byte stores make
      // four); elsewhere, and for a last partial group, byte by byte. The same bytes.
#ifdef __CUDA_ARCH__
      const bool words = (reinterpret_cast<std::uintptr_t>(row) & 3u) == 0;
#else
      constexpr bool words = false;
#endif
      std::uint32_t word = 0;
      num::for_each_element_lanes<R>(dim, rng, lane, lanes, [&](std::int32_t d, std::uint32_t w) {
        const float x = detail::sanitize(src[d], limit, ignored);
        float q = R::round(num::mul(num::mul(num::sub(x, mn), p.pre), p.inv), w);
        q = q < 0.0f ? 0.0f : (q > 255.0f ? 255.0f : q);
        const auto code = static_cast<std::uint8_t>(q);
        if (words && (d | 3) < dim) {  // d's group of four is whole
          word |= static_cast<std::uint32_t>(code) << (8 * (d & 3));
          if ((d & 3) == 3) {
            *reinterpret_cast<std::uint32_t*>(row + (d - 3)) = word;
            word = 0;
          }
        } else {
          row[d] = code;
        }
      });
    }
    if (lane == 0) {
      num::store_f32(row + dim, p.scale);
      num::store_f32(row + dim + 4, mn);
    }
    return sat;
  }

  /// First element of `src` (dim floats) that Int8Rowwise cannot hold, i.e. the first NaN,
  /// +-Inf or value with |x| > 2^126, or -1 when every element fits.
  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
