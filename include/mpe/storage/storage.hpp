// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/storage.hpp
/// @brief The StoragePolicy concept and helpers shared by the row formats.
///
/// A storage policy describes one row format of the low-precision store:
///   - `name`, `bits` (bits per element), `limit` (largest magnitude it holds),
///   - `data_bytes(dim)`: bytes of one row before padding,
///   - `Reader(row, dim)` with `operator[](d)`: dequantize element d to FP32,
///   - `store<Rounding>(src, dim, row, rng)`: quantize an FP32 row (returns true when a
///     value had to be saturated into the format's range),
///   - `find_unrepresentable(src, dim)`: first element the format cannot hold, or -1.
///   - optional, `store_lanes<Rounding>(src, dim, row, rng, lane, lanes)`: the part of
///     store() that lane `lane` of `lanes` writes (its element groups of four,
///     num::for_each_element_lanes, and lane 0 any row header); the lanes together write
///     store()'s bytes, and OR-ing their flags gives store()'s. Laned kernels (a warp per
///     row on a GPU) use it; without it lane 0 stores the whole row (detail::store_lanes).
/// All members are static and `MPE_HOST_DEVICE` (single-source host/device code).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/numeric/rounding.hpp"

namespace mpe {

/// A row format of the store (see the file comment for the members it must have).
template <class S>
concept StoragePolicy = requires(const std::uint8_t* row, std::uint8_t* out, const float* src,
                                 std::int32_t dim, const num::RowRng& rng) {
  { S::name } -> std::convertible_to<const char*>;
  { S::bits } -> std::convertible_to<int>;
  { S::limit } -> std::convertible_to<float>;
  { S::data_bytes(dim) } -> std::same_as<std::size_t>;
  typename S::Reader;
  requires requires(const typename S::Reader& r) {
    { r[dim] } -> std::same_as<float>;
  };
  { S::template store<NearestRounding>(src, dim, out, rng) } -> std::same_as<bool>;
  { S::find_unrepresentable(src, dim) } -> std::same_as<std::int32_t>;
};

/// A storage policy with the optional `store_lanes` member (see the file comment).
template <class S>
concept LanedStore = StoragePolicy<S> && requires(const float* src, std::int32_t dim, std::uint8_t* out,
                                                  const num::RowRng& rng, std::int32_t lane) {
  { S::template store_lanes<NearestRounding>(src, dim, out, rng, lane, lane) } -> std::same_as<bool>;
};

/// Bytes of one stored row: the format's data bytes rounded up to `alignment`
/// (a power of two, in bytes).
template <StoragePolicy S>
constexpr std::size_t row_bytes(std::int32_t dim, std::int32_t alignment) {
  const std::size_t a = static_cast<std::size_t>(alignment);
  return (S::data_bytes(dim) + a - 1) / a * a;
}

namespace detail {
/// Clamp a value into [-limit, limit]; NaN becomes 0. Sets `saturated` when it changed
/// anything (or the value was not finite).
MPE_HOST_DEVICE inline float sanitize(float x, float limit, bool& saturated) {
  if (x != x) {
    saturated = true;
    return 0.0f;
  }
  if (x > limit) {
    saturated = true;
    return limit;
  }
  if (x < -limit) {
    saturated = true;
    return -limit;
  }
  return x;
}

/// First element that is not finite or beyond +-limit, or -1.
MPE_HOST_DEVICE inline std::int32_t first_outside(const float* src, std::int32_t dim, float limit) {
  for (std::int32_t d = 0; d < dim; ++d) {
    const float x = src[d];
    if (!num::is_finite(x) || x > limit || x < -limit) return d;
  }
  return -1;
}

/// Min and max of the sanitized row (sequential; exact in any order for finite values).
/// In device code a 16-byte-aligned row of a multiple of 4 elements is read 4 elements per
/// load (the same comparisons in the same order).
MPE_HOST_DEVICE inline void sanitized_min_max(const float* src, std::int32_t dim, float limit, float& mn,
                                              float& mx, bool& saturated) {
  mn = sanitize(src[0], limit, saturated);
  mx = mn;
  std::int32_t d = 1;
#ifdef __CUDA_ARCH__
  if (dim % 4 == 0 && (reinterpret_cast<std::uintptr_t>(src) & 15u) == 0) {
    const float4* v = reinterpret_cast<const float4*>(src);
    for (std::int32_t g = 0; g < dim / 4; ++g) {
      const float4 q = v[g];
      const auto take = [&](float e) {
        const float x = sanitize(e, limit, saturated);
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
      };
      if (g > 0) take(q.x);  // element 0 started mn and mx
      take(q.y);
      take(q.z);
      take(q.w);
    }
    return;
  }
#endif
  for (; d < dim; ++d) {
    const float x = sanitize(src[d], limit, saturated);
    mn = x < mn ? x : mn;
    mx = x > mx ? x : mx;
  }
}

/// sanitized_min_max for lane `lane` of `lanes` of a laned row store: in device code with a
/// whole warp (lanes == 32, every lane calling) each lane scans its element groups (four
/// elements at 4 * lane, 4 * (lane + 32), ..., as num::for_each_element_lanes) and the warp
/// combines (value, element) pairs by shuffles, the lower element winning a tie, so that
/// mn and mx are the elements the sequential scan keeps (their sign of zero too: sanitized
/// values are never NaN); elsewhere the sequential scan. Every lane gets the same mn, mx and
/// `saturated` (set when any element was sanitized).
MPE_HOST_DEVICE inline void sanitized_min_max_lanes(const float* src, std::int32_t dim, float limit,
                                                    float& mn, float& mx, bool& saturated, std::int32_t lane,
                                                    std::int32_t lanes) {
#ifdef __CUDA_ARCH__
  if (lanes == 32) {
    constexpr std::int32_t kNone = 0x7fffffff;  // no element (a lane past the row's end)
    float lo = 0.0f, hi = 0.0f;
    std::int32_t ilo = kNone, ihi = kNone;
    bool sat = false;
    for (std::int32_t g = 4 * lane; g < dim; g += 128) {
      float v[4];
      if (g + 4 <= dim && (reinterpret_cast<std::uintptr_t>(src + g) & 15u) == 0) {
        const float4 q = *reinterpret_cast<const float4*>(src + g);
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
      } else {
        for (std::int32_t e = 0; e < 4; ++e) v[e] = g + e < dim ? src[g + e] : 0.0f;
      }
      for (std::int32_t e = 0; e < 4 && g + e < dim; ++e) {
        const float x = sanitize(v[e], limit, sat);
        if (ilo == kNone || x < lo) {
          lo = x;
          ilo = g + e;
        }
        if (ihi == kNone || x > hi) {
          hi = x;
          ihi = g + e;
        }
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float olo = __shfl_xor_sync(0xffffffffu, lo, off), ohi = __shfl_xor_sync(0xffffffffu, hi, off);
      const std::int32_t oilo = __shfl_xor_sync(0xffffffffu, ilo, off),
                         oihi = __shfl_xor_sync(0xffffffffu, ihi, off);
      if (oilo != kNone && (ilo == kNone || olo < lo || (olo == lo && oilo < ilo))) {
        lo = olo;
        ilo = oilo;
      }
      if (oihi != kNone && (ihi == kNone || ohi > hi || (ohi == hi && oihi < ihi))) {
        hi = ohi;
        ihi = oihi;
      }
    }
    saturated = __any_sync(0xffffffffu, sat) || saturated;
    mn = lo;
    mx = hi;
    return;
  }
#endif
  (void)lane;
  (void)lanes;
  sanitized_min_max(src, dim, limit, mn, mx, saturated);
}

/// The largest |sanitized element| of `src` (non-negative: every order gives the same bits)
/// for lane `lane` of `lanes`: in device code with a whole warp (lanes == 32, every lane
/// calling) each lane's element groups and a shuffle maximum, elsewhere one scan. Sets
/// `saturated` (in every lane) when any element was sanitized.
MPE_HOST_DEVICE inline float sanitized_abs_max_lanes(const float* src, std::int32_t dim, float limit,
                                                     bool& saturated, std::int32_t lane, std::int32_t lanes) {
  float amax = 0.0f;
  bool sat = false;
  // Element groups of four as num::for_each_element_lanes: a warp's lanes on a GPU, else one.
  std::int32_t first = 0, step = 1;
#ifdef __CUDA_ARCH__
  if (lanes == 32) {
    first = lane;
    step = 32;
  }
#else
  (void)lane;
  (void)lanes;
#endif
  for (std::int32_t g = first; 4 * g < dim; g += step) {
    const std::int32_t end = 4 * g + 4 < dim ? 4 * g + 4 : dim;
    for (std::int32_t d = 4 * g; d < end; ++d) {
      const float a = num::bits_float(num::float_bits(sanitize(src[d], limit, sat)) & 0x7fffffffu);
      amax = a > amax ? a : amax;
    }
  }
#ifdef __CUDA_ARCH__
  if (lanes == 32) {
    for (int off = 16; off > 0; off >>= 1) {
      const float o = __shfl_xor_sync(0xffffffffu, amax, off);
      amax = o > amax ? o : amax;
    }
    sat = __any_sync(0xffffffffu, sat);
  }
#endif
  saturated = sat || saturated;
  return amax;
}

/// Calls f(d, word) for each element with its random word (num::for_each_element).
using num::for_each_element;

/// Lane `lane` of `lanes` of S::store<R>(src, dim, row, rng): S::store_lanes where S has
/// it, else the whole row in lane 0 (the other lanes write nothing and return false). The
/// OR of the lanes' results is store()'s flag.
template <class S, class R>
MPE_HOST_DEVICE inline bool store_lanes(const float* src, std::int32_t dim, std::uint8_t* row,
                                        const num::RowRng& rng, std::int32_t lane, std::int32_t lanes) {
  if constexpr (LanedStore<S>) {
    return S::template store_lanes<R>(src, dim, row, rng, lane, lanes);
  } else {
    return lane == 0 ? S::template store<R>(src, dim, row, rng) : false;
  }
}
}  // namespace detail

}  // namespace mpe
