// SPDX-License-Identifier: Apache-2.0
/// @file mpe/numeric/reduce.hpp
/// @brief The one fixed summation order used for reductions across D (numerics contract,
/// docs/numerics.md): pairwise summation over blocks of 8, written once for host and
/// device so both sides give the same bits.
#pragma once

#include <cstdint>

#include "mpe/numeric/float_ops.hpp"

namespace mpe::num {

/// Sum f(0) + ... + f(n-1) in a fixed pairwise order: blocks of 8 consecutive terms are
/// summed left to right; block sums are combined like a binary counter (two partial sums
/// of equal size are added as soon as both exist), then the remaining partials from the
/// smallest to the largest. Error O(log n) ulps instead of O(n). Uses O(log n) stack.
template <class F>
MPE_HOST_DEVICE inline float pairwise_sum(std::int64_t n, F&& f) {
  float stack[64];
  int level[64];
  int top = 0;
  std::int64_t i = 0;
  while (i < n) {
    const std::int64_t end = i + 8 < n ? i + 8 : n;
    float s = f(i);
    for (std::int64_t j = i + 1; j < end; ++j) s = add(s, f(j));
    i = end;
    int lv = 0;
    while (top > 0 && level[top - 1] == lv) {
      s = add(stack[top - 1], s);
      --top;
      ++lv;
    }
    stack[top] = s;
    level[top] = lv;
    ++top;
  }
  if (top == 0) return 0.0f;
  float s = stack[top - 1];
  for (int k = top - 2; k >= 0; --k) s = add(stack[k], s);
  return s;
}

}  // namespace mpe::num
