// SPDX-License-Identifier: Apache-2.0
/// @file mpe/optim/sgd.hpp
/// @brief `Sgd`: plain stochastic gradient descent, w -= lr * g. No state.
#pragma once

#include "mpe/numeric/float_ops.hpp"
#include "mpe/optim/optimizer.hpp"

namespace mpe {

/// Plain SGD: w -= learning_rate * g (g = the row's gradient summed over the batch).
struct Sgd {
  /// Step size lr in w -= lr * g. No default (`Sgd{0.01f}`); check() requires it to be
  /// finite and >= 0 (0 trains nothing).
  float learning_rate;
};

/// Behaviour of Sgd (the Optimizer concept, optimizer.hpp): stateless, u = lr * g.
template <>
struct OptimizerRule<Sgd> {
  static constexpr const char* name = "sgd";           ///< checkpoint name of the optimizer
  static constexpr const char* state_domain = "none";  ///< no state, nothing to check
  /// 0: no state per row, whatever D (the state pointers given to step are not read).
  MPE_HOST_DEVICE static constexpr std::int64_t state_floats(std::int32_t /*dim*/) { return 0; }
  /// Replaces each of the `dim` gradient elements by its update u_d = lr * g_d (one
  /// correctly rounded num::mul); state_in / state_out (0 floats, may be null) and the
  /// step number t are unused. Sparse like every mpe optimizer: only the rows present in
  /// the batch step.
  MPE_HOST_DEVICE static void step(const Sgd& o, const float* /*state_in*/, float* /*state_out*/, float* g,
                                   std::int32_t dim, std::uint64_t /*t*/) {
    for (std::int32_t d = 0; d < dim; ++d) g[d] = num::mul(gradient_scale(o), g[d]);
  }
  /// The factor step multiplies each gradient element by: the learning rate (makes Sgd a
  /// ScalesGradient optimizer).
  MPE_HOST_DEVICE static float gradient_scale(const Sgd& o) { return o.learning_rate; }
  /// Empty when learning_rate is finite and >= 0, else "Sgd.learning_rate = <value> is not
  /// finite" or "... is negative".
  static std::string check(const Sgd& o) {
    if (!num::is_finite(o.learning_rate))
      return "Sgd.learning_rate = " + format_float(o.learning_rate) + " is not finite";
    if (o.learning_rate < 0.0f)
      return "Sgd.learning_rate = " + format_float(o.learning_rate) + " is negative; must be >= 0";
    return {};
  }
  /// Always true: there is no state to check.
  static bool state_ok(const float* /*state*/, std::int32_t /*dim*/) { return true; }
};

}  // namespace mpe
