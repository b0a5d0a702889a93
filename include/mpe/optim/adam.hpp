// SPDX-License-Identifier: Apache-2.0
/// @file mpe/optim/adam.hpp
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
  /// Step size lr. No default (`Adam{1e-3f}`); check() requires it to be finite and >= 0
  /// (0 trains nothing).
  float learning_rate;
  /// Decay of the first moment m (torch's betas[0], default 0.9); must be in [0, 1).
  float beta1 = 0.9f;
  /// Decay of the second moment v (torch's betas[1], default 0.999); must be in [0, 1).
  float beta2 = 0.999f;
  /// Added to sqrt(v / (1 - beta2^t)) in the denominator (outside the square root, as
  /// torch); default 1e-8 (torch's); must be finite and > 0.
  float eps = 1e-8f;
};

/// Behaviour of Adam (the Optimizer concept, optimizer.hpp): two FP32 moments per
/// element, bias-corrected with the object's step number.
template <>
struct OptimizerRule<Adam> {
  static constexpr const char* name = "adam";  ///< checkpoint name of the optimizer
  /// m may have any sign; v is a decaying sum of squares.
  static constexpr const char* state_domain = "finite, with the second moments >= 0";
  /// 2 * D floats per row: the first moments m_0..m_{D-1}, then the second moments
  /// v_0..v_{D-1} (all zero before the row's first update).
  MPE_HOST_DEVICE static constexpr std::int64_t state_floats(std::int32_t dim) {
    return 2 * std::int64_t{dim};
  }
  /// One row's update at step t (1-based; t = 0 would divide by 1 - beta^0 = 0):
  /// c1 = 1 - beta1^t, c2 = 1 - beta2^t (num::pow_int, correctly rounded products), then per
  /// element d in [0, dim): m_d' = beta1 * m_d + (1 - beta1) * g_d,
  /// v_d' = beta2 * v_d + (1 - beta2) * (g_d * g_d) (written to state_out[d] and
  /// state_out[dim + d]) and u_d = (lr * (m_d' / c1)) / (sqrt(v_d' / c2) + eps) written over
  /// g_d. Every operation is a correctly rounded num:: one (no FMA). Sparse ("lazy"): only
  /// the rows present in the batch step, so an absent row's moments do not decay, while t
  /// (and so the bias correction) is global to the object.
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
  /// Empty when learning_rate is finite and >= 0, beta1 and beta2 are in [0, 1) and eps is finite
  /// and > 0; else the first problem, e.g. "Adam.beta2 = 1 must be in [0, 1)".
  static std::string check(const Adam& o) {
    if (!num::is_finite(o.learning_rate))
      return "Adam.learning_rate = " + format_float(o.learning_rate) + " is not finite";
    if (o.learning_rate < 0.0f)
      return "Adam.learning_rate = " + format_float(o.learning_rate) + " is negative; must be >= 0";
    if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f))
      return "Adam.beta1 = " + format_float(o.beta1) + " must be in [0, 1)";
    if (!(o.beta2 >= 0.0f && o.beta2 < 1.0f))
      return "Adam.beta2 = " + format_float(o.beta2) + " must be in [0, 1)";
    if (!num::is_finite(o.eps) || !(o.eps > 0.0f))
      return "Adam.eps = " + format_float(o.eps) + " must be finite and > 0";
    return {};
  }
  /// True when each of the row's D first moments is finite and each of its D second
  /// moments is finite and >= 0 (NaN fails).
  static bool state_ok(const float* state, std::int32_t dim) {
    for (std::int32_t d = 0; d < dim; ++d) {
      if (!num::is_finite(state[d]) || !num::is_finite(state[dim + d]) || state[dim + d] < 0.0f) return false;
    }
    return true;
  }
};

}  // namespace mpe
