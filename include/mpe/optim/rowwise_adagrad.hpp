// SPDX-License-Identifier: Apache-2.0
/// @file rowwise_adagrad.hpp
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
  float learning_rate;
  float eps = 1e-8f;
};

template <>
struct OptimizerRule<RowwiseAdagrad> {
  static constexpr const char* name = "rowwise_adagrad";
  /// G is a sum of squares.
  static constexpr const char* state_domain = "finite and >= 0";
  MPE_HOST_DEVICE static constexpr std::int64_t state_floats(std::int32_t /*dim*/) { return 1; }
  MPE_HOST_DEVICE static void step(const RowwiseAdagrad& o, const float* state_in, float* state_out, float* g,
                                   std::int32_t dim, std::uint64_t /*t*/) {
    const float sq = num::pairwise_sum(dim, [g](std::int64_t d) { return num::mul(g[d], g[d]); });
    const float G = num::add(state_in[0], num::div(sq, static_cast<float>(dim)));
    state_out[0] = G;
    const float m = num::div(o.learning_rate, num::add(num::sqrt(G), o.eps));
    for (std::int32_t d = 0; d < dim; ++d) g[d] = num::mul(m, g[d]);
  }
  static std::string check(const RowwiseAdagrad& o) {
    if (!num::is_finite(o.learning_rate)) {
      return "RowwiseAdagrad.learning_rate = " + format_float(o.learning_rate) + " is not finite";
    }
    if (!num::is_finite(o.eps) || !(o.eps > 0.0f)) {  // eps = 0 would give 0/0 for a zero gradient
      return "RowwiseAdagrad.eps = " + format_float(o.eps) + " must be finite and > 0";
    }
    return {};
  }
  static bool state_ok(const float* state, std::int32_t /*dim*/) {
    return num::is_finite(state[0]) && state[0] >= 0.0f;
  }
};

}  // namespace mpe
