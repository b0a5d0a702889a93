// SPDX-License-Identifier: Apache-2.0
/// @file adagrad.hpp
/// @brief `Adagrad`: element-wise Adagrad (torch.optim.Adagrad without learning-rate decay
/// or weight decay; FBGEMM's EmbOptimType.ADAGRAD), one accumulator per element.
#pragma once

#include "mpe/numeric/float_ops.hpp"
#include "mpe/optim/optimizer.hpp"

namespace mpe {

/// Element-wise Adagrad (Duchi, Hazan, Singer 2011; torch.optim.Adagrad with lr_decay = 0,
/// weight_decay = 0, initial_accumulator_value = 0): per element G_d += g_d^2;
/// w_d -= lr * g_d / (sqrt(G_d) + eps). State: D floats per row (FP32).
struct Adagrad {
  float learning_rate;
  float eps = 1e-10f;  ///< torch.optim.Adagrad's default
};

template <>
struct OptimizerRule<Adagrad> {
  static constexpr const char* name = "adagrad";
  static constexpr const char* state_domain = "finite and >= 0 (per element)";
  MPE_HOST_DEVICE static constexpr std::int64_t state_floats(std::int32_t dim) { return dim; }
  MPE_HOST_DEVICE static void step(const Adagrad& o, const float* state_in, float* state_out, float* g,
                                   std::int32_t dim, std::uint64_t /*t*/) {
    for (std::int32_t d = 0; d < dim; ++d) {
      const float G = num::add(state_in[d], num::mul(g[d], g[d]));
      state_out[d] = G;
      g[d] = num::div(num::mul(o.learning_rate, g[d]), num::add(num::sqrt(G), o.eps));
    }
  }
  static std::string check(const Adagrad& o) {
    if (!num::is_finite(o.learning_rate)) {
      return "Adagrad.learning_rate = " + format_float(o.learning_rate) + " is not finite";
    }
    if (!num::is_finite(o.eps) || !(o.eps > 0.0f))
      return "Adagrad.eps = " + format_float(o.eps) + " must be finite and > 0";
    return {};
  }
  static bool state_ok(const float* state, std::int32_t dim) {
    for (std::int32_t d = 0; d < dim; ++d) {
      if (!(num::is_finite(state[d]) && state[d] >= 0.0f)) return false;
    }
    return true;
  }
};

}  // namespace mpe
