// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/fp32.hpp
/// @brief `Fp32` storage: the full-precision reference format, D x f32 (4D bytes).
#pragma once

#include <cfloat>

#include "mpe/storage/storage.hpp"

namespace mpe {

/// Row format D x f32, little-endian, 4D bytes. The reference: with Fp32 storage the
/// cache is invisible (same bits with or without it).
struct Fp32 {
  static constexpr const char* name = "fp32";  ///< format name (messages, checkpoints)
  static constexpr int bits = 32;              ///< bits per element
  static constexpr float limit = FLT_MAX;      ///< largest magnitude held: every finite float
  /// Bytes of one row before padding: 4 * dim.
  static constexpr std::size_t data_bytes(std::int32_t dim) { return 4 * static_cast<std::size_t>(dim); }

  /// Reads element d of a row.
  struct Reader {
    const std::uint8_t* row;  ///< first byte of the row (any alignment; read with memcpy)
    /// Views the stored row at `r`; `dim` is unused (no parameters after the data).
    MPE_HOST_DEVICE Reader(const std::uint8_t* r, std::int32_t /*dim*/) : row(r) {}
    /// Element d in [0, dim), exactly as stored.
    MPE_HOST_DEVICE float operator[](std::int32_t d) const { return num::load_f32(row + 4 * d); }
  };

  /// Copies the row; non-finite values saturate (NaN -> 0, +-Inf -> +-FLT_MAX). One
  /// branch-free pass copies and tests every value (NaN or +-Inf: (bits & 0x7fffffff) +
  /// 0x00800000 reaches bit 31); only a row holding such a value is written again,
  /// sanitized (the same bytes as sanitizing each value).
  template <class R>
  MPE_HOST_DEVICE static bool store(const float* src, std::int32_t dim, std::uint8_t* row,
                                    const num::RowRng& /*rng*/) {
    std::uint32_t acc = 0;
    for (std::int32_t d = 0; d < dim; ++d) {
      const float x = src[d];
      num::store_f32(row + 4 * d, x);
      acc |= (num::float_bits(x) & 0x7fffffffu) + (0x7fffffffu - num::float_bits(limit));
    }
    if ((acc >> 31) == 0) return false;
    bool sat = false;
    for (std::int32_t d = 0; d < dim; ++d) num::store_f32(row + 4 * d, detail::sanitize(src[d], limit, sat));
    return sat;
  }

  /// The part of store() that lane `lane` of `lanes` writes: the elements of its groups of
  /// four (num::for_each_element_lanes' groups), the same values as store(); returns
  /// whether one of them had to be sanitized (store()'s flag is the OR over the lanes). A
  /// lane's part is copied and tested in one branch-free pass, and sanitized in a second
  /// only when it holds such a value.
  template <class R>
  MPE_HOST_DEVICE static bool store_lanes(const float* src, std::int32_t dim, std::uint8_t* row,
                                          const num::RowRng& /*rng*/, std::int32_t lane, std::int32_t lanes) {
    std::uint32_t acc = 0;
    for (std::int32_t g = 4 * lane; g < dim; g += 4 * lanes) {
      const std::int32_t end = g + 4 < dim ? g + 4 : dim;
      for (std::int32_t d = g; d < end; ++d) {
        const float x = src[d];
        num::store_f32(row + 4 * d, x);
        acc |= (num::float_bits(x) & 0x7fffffffu) + (0x7fffffffu - num::float_bits(limit));
      }
    }
    if ((acc >> 31) == 0) return false;
    bool sat = false;
    for (std::int32_t g = 4 * lane; g < dim; g += 4 * lanes) {
      const std::int32_t end = g + 4 < dim ? g + 4 : dim;
      for (std::int32_t d = g; d < end; ++d)
        num::store_f32(row + 4 * d, detail::sanitize(src[d], limit, sat));
    }
    return sat;
  }

  /// First element of `src` (dim floats) that Fp32 cannot hold, i.e. the first NaN or
  /// +-Inf, or -1 when every element is finite.
  MPE_HOST_DEVICE static std::int32_t find_unrepresentable(const float* src, std::int32_t dim) {
    return detail::first_outside(src, dim, limit);
  }
};

}  // namespace mpe
