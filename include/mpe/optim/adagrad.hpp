// SPDX-License-Identifier: Apache-2.0
/// @file mpe/optim/adagrad.hpp
/// @brief `Adagrad`: element-wise Adagrad (torch.optim.Adagrad without learning-rate decay
/// or weight decay; FBGEMM's EmbOptimType.EXACT_ADAGRAD), one accumulator per element.
#pragma once

#include "mpe/numeric/float_ops.hpp"
#include "mpe/optim/optimizer.hpp"

namespace mpe {

/// Element-wise Adagrad (Duchi, Hazan, Singer 2011; torch.optim.Adagrad with lr_decay = 0,
/// weight_decay = 0, initial_accumulator_value = 0): per element G_d += g_d^2;
/// w_d -= lr * g_d / (sqrt(G_d) + eps). State: D floats per row (FP32).
struct Adagrad {
  /// Step size lr in w_d -= lr * g_d / (sqrt(G_d) + eps). No default (`Adagrad{0.01f}`);
  /// check() requires it to be finite and >= 0 (0 trains nothing).
  float learning_rate;
  /// Added to sqrt(G_d) in the denominator (outside the square root, as torch does); keeps
  /// the update finite while G_d = 0. Must be finite and > 0 (check()).
  float eps = 1e-10f;  ///< torch.optim.Adagrad's default
};

/// Behaviour of Adagrad (the Optimizer concept, optimizer.hpp): one FP32 accumulator per
/// element.
template <>
struct OptimizerRule<Adagrad> {
  static constexpr const char* name = "adagrad";  ///< checkpoint name of the optimizer
  /// Every G_d is a sum of squares: finite and >= 0.
  static constexpr const char* state_domain = "finite and >= 0 (per element)";
  /// D floats per row: the accumulators G_0..G_{D-1} (zeros before the row's first update).
  MPE_HOST_DEVICE static constexpr std::int64_t state_floats(std::int32_t dim) { return dim; }
  /// One row's update, per element d in [0, dim): G_d' = G_d + g_d * g_d (written to
  /// state_out[d]), then u_d = (lr * g_d) / (sqrt(G_d') + eps) written over g_d: the new
  /// accumulator, this gradient included, as torch.optim.Adagrad. Every operation is a
  /// correctly rounded num:: one (no FMA). t is unused (no bias correction). Sparse: only
  /// the rows present in the batch step; absent rows keep their G.
  MPE_HOST_DEVICE static void step(const Adagrad& o, const float* state_in, float* state_out, float* g,
                                   std::int32_t dim, std::uint64_t /*t*/) {
    for (std::int32_t d = 0; d < dim; ++d) {
      const float G = num::add(state_in[d], num::mul(g[d], g[d]));
      state_out[d] = G;
      g[d] = num::div(num::mul(o.learning_rate, g[d]), num::add(num::sqrt(G), o.eps));
    }
  }
  /// Empty when learning_rate is finite and >= 0 and eps is finite and > 0; else the first
  /// problem, e.g. "Adagrad.eps = 0 must be finite and > 0".
  static std::string check(const Adagrad& o) {
    if (!num::is_finite(o.learning_rate)) {
      return "Adagrad.learning_rate = " + format_float(o.learning_rate) + " is not finite";
    }
    if (o.learning_rate < 0.0f)
      return "Adagrad.learning_rate = " + format_float(o.learning_rate) + " is negative; must be >= 0";
    if (!num::is_finite(o.eps) || !(o.eps > 0.0f))
      return "Adagrad.eps = " + format_float(o.eps) + " must be finite and > 0";
    return {};
  }
  /// True when each of the row's D accumulators is finite and >= 0 (NaN fails).
  static bool state_ok(const float* state, std::int32_t dim) {
    for (std::int32_t d = 0; d < dim; ++d) {
      if (!(num::is_finite(state[d]) && state[d] >= 0.0f)) return false;
    }
    return true;
  }
};

}  // namespace mpe
