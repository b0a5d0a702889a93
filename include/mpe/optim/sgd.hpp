// SPDX-License-Identifier: Apache-2.0
/// @file sgd.hpp
/// @brief `Sgd`: plain stochastic gradient descent, w -= lr * g. No state.
#pragma once

#include "mpe/numeric/float_ops.hpp"
#include "mpe/optim/optimizer.hpp"

namespace mpe {

/// Plain SGD: w -= learning_rate * g (g = the row's gradient summed over the batch).
struct Sgd {
  float learning_rate;
};

template <>
struct OptimizerRule<Sgd> {
  static constexpr const char* name = "sgd";
  static constexpr const char* state_domain = "none";
  MPE_HOST_DEVICE static constexpr std::int64_t state_floats(std::int32_t /*dim*/) { return 0; }
  MPE_HOST_DEVICE static void step(const Sgd& o, const float* /*state_in*/, float* /*state_out*/, float* g,
                                   std::int32_t dim, std::uint64_t /*t*/) {
    for (std::int32_t d = 0; d < dim; ++d) g[d] = num::mul(o.learning_rate, g[d]);
  }
  static std::string check(const Sgd& o) {
    return num::is_finite(o.learning_rate)
               ? std::string()
               : "Sgd.learning_rate = " + format_float(o.learning_rate) + " is not finite";
  }
  static bool state_ok(const float* /*state*/, std::int32_t /*dim*/) { return true; }
};

}  // namespace mpe
