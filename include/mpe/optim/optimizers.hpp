// SPDX-License-Identifier: Apache-2.0
/// @file optimizers.hpp
/// @brief Per-row update rules. Each has the shape w_rd -= m_r * g_rd, where g_r is the
/// row's gradient summed over the batch and m_r a per-row multiplier that may read and
/// update per-row optimizer state.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/reduce.hpp"

namespace mpe {

/// Shortest decimal that reads back as the same float ("1e+30", "0.1", "nan"): for error
/// messages.
inline std::string format_float(float x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

/// Plain SGD: w -= learning_rate * g. No state.
struct Sgd {
  float learning_rate;
};

/// FBGEMM's exact row-wise Adagrad (EXACT_ROWWISE_ADAGRAD): one FP32 accumulator G_r per
/// table row (all rows, not cached), G_r += mean_d(g_rd^2); m = lr / (sqrt(G_r) + eps);
/// w_rd -= m * g_rd. The mean uses mpe's fixed pairwise order (num::pairwise_sum).
struct RowwiseAdagrad {
  float learning_rate;
  float eps = 1e-8f;
};

/// How an optimizer type plugs into backward(): `state_floats` per table row and the
/// per-row multiplier. Specialize for a new optimizer of the same shape.
template <class Opt>
struct OptimizerRule;

template <>
struct OptimizerRule<Sgd> {
  static constexpr int state_floats = 0;
  static constexpr int kind = 1;
  static constexpr const char* name = "sgd";
  /// Values a row's state may hold (checked by load()); Sgd has none.
  static constexpr const char* state_domain = "none";
  static bool state_ok(const float* /*state*/) { return true; }
  MPE_HOST_DEVICE static float multiplier(const Sgd& o, float* /*state*/, const float* /*g*/,
                                          std::int32_t /*dim*/) {
    return o.learning_rate;
  }
  /// Empty when the parameters are usable, else what is wrong (named, with the value).
  static std::string check(const Sgd& o) {
    return num::is_finite(o.learning_rate)
               ? std::string()
               : "Sgd.learning_rate = " + format_float(o.learning_rate) + " is not finite";
  }
};

template <>
struct OptimizerRule<RowwiseAdagrad> {
  static constexpr int state_floats = 1;
  static constexpr int kind = 2;
  static constexpr const char* name = "rowwise_adagrad";
  /// Values a row's state may hold (checked by load()): G is a sum of squares.
  static constexpr const char* state_domain = "finite and >= 0";
  static bool state_ok(const float* state) { return num::is_finite(state[0]) && state[0] >= 0.0f; }
  MPE_HOST_DEVICE static float multiplier(const RowwiseAdagrad& o, float* state, const float* g,
                                          std::int32_t dim) {
    const float sq = num::pairwise_sum(dim, [g](std::int64_t d) { return num::mul(g[d], g[d]); });
    const float G = num::add(*state, num::div(sq, static_cast<float>(dim)));
    *state = G;
    return num::div(o.learning_rate, num::add(num::sqrt(G), o.eps));
  }
  /// Empty when the parameters are usable, else what is wrong (named, with the value).
  static std::string check(const RowwiseAdagrad& o) {
    if (!num::is_finite(o.learning_rate)) {
      return "RowwiseAdagrad.learning_rate = " + format_float(o.learning_rate) + " is not finite";
    }
    if (!num::is_finite(o.eps) || o.eps < 0.0f) {
      return "RowwiseAdagrad.eps = " + format_float(o.eps) + " must be finite and >= 0";
    }
    return {};
  }
};

/// The optimizers a checkpoint can name by OptimizerRule::kind (load() checks the state
/// against the rule of the kind the file names).
template <class... Opts>
struct OptimizerList {
  /// Calls f.template operator()<OptimizerRule<O>>() for the optimizer O of `kind`;
  /// returns false when no listed optimizer has that kind.
  template <class F>
  static bool visit(int kind, F&& f) {
    return (
        (OptimizerRule<Opts>::kind == kind ? (f.template operator()<OptimizerRule<Opts>>(), true) : false) ||
        ...);
  }
};
using KnownOptimizers = OptimizerList<Sgd, RowwiseAdagrad>;

}  // namespace mpe
