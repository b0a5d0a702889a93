// SPDX-License-Identifier: Apache-2.0
/// @file mpe/optim/rowwise_adagrad.hpp
/// @brief `RowwiseAdagrad`: FBGEMM's exact row-wise Adagrad, one FP32 accumulator per row.
#pragma once

#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/reduce.hpp"
#include "mpe/optim/optimizer.hpp"

namespace mpe {

/// FBGEMM's exact row-wise Adagrad (EXACT_ROWWISE_ADAGRAD): one FP32 accumulator G_r per
/// table row, G_r += mean_d(g_rd^2); m = lr / (sqrt(G_r) + eps); w_rd -= m * g_rd. The mean
/// uses mpe's fixed pairwise order (num::pairwise_sum). State: 1 float per row.
struct RowwiseAdagrad {
  /// Step size lr in m = lr / (sqrt(G_r) + eps). No default (`RowwiseAdagrad{0.01f}`);
  /// check() requires it to be finite and >= 0 (0 trains nothing).
  float learning_rate;
  /// Added to sqrt(G_r) in the denominator; keeps the update finite while G_r = 0.
  /// Default 1e-8 (FBGEMM's TBE default); must be finite and > 0 (check()).
  float eps = 1e-8f;
};

/// Behaviour of RowwiseAdagrad (the Optimizer concept, optimizer.hpp): one FP32
/// accumulator per row.
template <>
struct OptimizerRule<RowwiseAdagrad> {
  static constexpr const char* name = "rowwise_adagrad";  ///< checkpoint name of the optimizer
  /// G is a sum of squares.
  static constexpr const char* state_domain = "finite and >= 0";
  /// 1 float per row, whatever D: the accumulator G_r (0 before the row's first update).
  MPE_HOST_DEVICE static constexpr std::int64_t state_floats(std::int32_t /*dim*/) { return 1; }
  /// One row's update: s = num::pairwise_sum over d of g_d * g_d (mpe's fixed pairwise
  /// order), G_r' = G_r + s / dim (written to state_out[0]), m = lr / (sqrt(G_r') + eps),
  /// then u_d = m * g_d written over each g_d. Every operation is a correctly rounded
  /// num:: one. t is unused (no bias correction). Sparse: only the rows present in the
  /// batch step; absent rows keep their G_r.
  MPE_HOST_DEVICE static void step(const RowwiseAdagrad& o, const float* state_in, float* state_out, float* g,
                                   std::int32_t dim, std::uint64_t /*t*/) {
    const float sq = num::pairwise_sum(dim, [g](std::int64_t d) { return num::mul(g[d], g[d]); });
    const float G = num::add(state_in[0], num::div(sq, static_cast<float>(dim)));
    state_out[0] = G;
    const float m = num::div(o.learning_rate, num::add(num::sqrt(G), o.eps));
    for (std::int32_t d = 0; d < dim; ++d) g[d] = num::mul(m, g[d]);
  }
  /// Empty when learning_rate is finite and >= 0 and eps is finite and > 0; else the first
  /// problem, e.g. "RowwiseAdagrad.eps = 0 must be finite and > 0".
  static std::string check(const RowwiseAdagrad& o) {
    if (!num::is_finite(o.learning_rate)) {
      return "RowwiseAdagrad.learning_rate = " + format_float(o.learning_rate) + " is not finite";
    }
    if (o.learning_rate < 0.0f)
      return "RowwiseAdagrad.learning_rate = " + format_float(o.learning_rate) + " is negative; must be >= 0";
    if (!num::is_finite(o.eps) || !(o.eps > 0.0f)) {  // eps = 0 would give 0/0 for a zero gradient
      return "RowwiseAdagrad.eps = " + format_float(o.eps) + " must be finite and > 0";
    }
    return {};
  }
  /// True when the row's accumulator G_r is finite and >= 0 (NaN fails).
  static bool state_ok(const float* state, std::int32_t /*dim*/) {
    return num::is_finite(state[0]) && state[0] >= 0.0f;
  }
};

}  // namespace mpe
