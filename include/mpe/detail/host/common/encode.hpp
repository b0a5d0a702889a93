// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/common/encode.hpp
/// @brief Scalar code shared by the host's AVX2 and AVX-512 row stores (not public): the end
/// of their min / max scans. Host only.
#pragma once

#include <cstdint>

#include "mpe/storage/storage.hpp"

namespace mpe::detail::simd {

/// The end of both widths' min_max: the row's min and max from the per-lane extremes of a
/// SIMD scan (`lanes` of each, in lane order), then, where an extreme is zero, the
/// sequential scan (detail::sanitized_min_max_lanes), which decides its sign; false where
/// that scan finds an element to sanitize.
inline bool reduce_min_max(const float* lane_lo, const float* lane_hi, int lanes, const float* src,
                           std::int32_t dim, float limit, float& mn, float& mx) {
  mn = lane_lo[0];
  mx = lane_hi[0];
  for (int i = 1; i < lanes; ++i) {
    mn = lane_lo[i] < mn ? lane_lo[i] : mn;
    mx = lane_hi[i] > mx ? lane_hi[i] : mx;
  }
  bool sat = false;
  if (mn == 0.0f || mx == 0.0f) sanitized_min_max_lanes(src, dim, limit, mn, mx, sat, 0, 1);
  return !sat;
}

}  // namespace mpe::detail::simd
