// SPDX-License-Identifier: Apache-2.0
/// @file adam.hpp
/// @brief `Adam` with bias correction (Kingma and Ba 2015; torch.optim.Adam without weight
/// decay or AMSGrad; FBGEMM's EmbOptimType.ADAM), two moments per element.
#pragma once

#include "mpe/numeric/float_ops.hpp"
#include "mpe/optim/optimizer.hpp"

namespace mpe {

/// Adam: per element m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), with t the 1-based step of
/// the object (CachedEmbedding::step() + 1: every applied backward() counts, as FBGEMM's
/// global iteration; torch.optim.Adam counts per parameter, which for an embedding table
/// trained every step is the same). Sparse ("lazy") like FBGEMM's: only the rows of the
/// batch are updated; torch.optim.Adam on a dense gradient would also decay the moments of
/// rows absent from the batch. State: 2D floats per row, (m_0..m_{D-1}, v_0..v_{D-1}).
struct Adam {
  float learning_rate;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

template <>
struct OptimizerRule<Adam> {
  static constexpr const char* name = "adam";
  static constexpr const char* state_domain = "finite, with the second moments >= 0";
  MPE_HOST_DEVICE static constexpr std::int64_t state_floats(std::int32_t dim) {
    return 2 * std::int64_t{dim};
  }
  MPE_HOST_DEVICE static void step(const Adam& o, const float* state_in, float* state_out, float* g,
                                   std::int32_t dim, std::uint64_t t) {
    const float c1 = num::sub(1.0f, num::pow_int(o.beta1, t));
    const float c2 = num::sub(1.0f, num::pow_int(o.beta2, t));
    const float a1 = num::sub(1.0f, o.beta1), a2 = num::sub(1.0f, o.beta2);
    for (std::int32_t d = 0; d < dim; ++d) {
      const float m = num::add(num::mul(o.beta1, state_in[d]), num::mul(a1, g[d]));
      const float v = num::add(num::mul(o.beta2, state_in[dim + d]), num::mul(a2, num::mul(g[d], g[d])));
      state_out[d] = m;
      state_out[dim + d] = v;
      const float mhat = num::div(m, c1), vhat = num::div(v, c2);
      g[d] = num::div(num::mul(o.learning_rate, mhat), num::add(num::sqrt(vhat), o.eps));
    }
  }
  static std::string check(const Adam& o) {
    if (!num::is_finite(o.learning_rate))
      return "Adam.learning_rate = " + format_float(o.learning_rate) + " is not finite";
    if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f))
      return "Adam.beta1 = " + format_float(o.beta1) + " must be in [0, 1)";
    if (!(o.beta2 >= 0.0f && o.beta2 < 1.0f))
      return "Adam.beta2 = " + format_float(o.beta2) + " must be in [0, 1)";
    if (!num::is_finite(o.eps) || !(o.eps > 0.0f))
      return "Adam.eps = " + format_float(o.eps) + " must be finite and > 0";
    return {};
  }
  static bool state_ok(const float* state, std::int32_t dim) {
    for (std::int32_t d = 0; d < dim; ++d) {
      if (!num::is_finite(state[d]) || !num::is_finite(state[dim + d]) || state[dim + d] < 0.0f) return false;
    }
    return true;
  }
};

}  // namespace mpe
