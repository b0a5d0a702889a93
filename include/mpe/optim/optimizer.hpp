// SPDX-License-Identifier: Apache-2.0
/// @file mpe/optim/optimizer.hpp
/// @brief The `Optimizer` concept: how an optimizer type plugs into
/// CachedEmbedding::backward(), and the list of optimizers a checkpoint can name.
///
/// An optimizer is a plain value type holding its hyperparameters (passed to every
/// backward() call, so learning-rate schedules need nothing else). Its behaviour lives in
/// a specialization of `OptimizerRule<Opt>` with these static members:
///
/// | member | meaning |
/// |---|---|
/// | `name` | identifies the optimizer (and its state) in checkpoints, e.g. `"adam"` |
/// | `state_floats(D)` | state values per table row (may depend on D; stored in the table's StatePrecision,
/// stepped in FP32) | | `step(o, state_in, state_out, g, D, t)` | one row's update: reads the row's summed
/// gradient `g` (D floats) and its state (`state_in`, state_floats(D) values; zeros before the row's first
/// update), writes the new state to `state_out` and replaces `g` by the update `u` applied as `w = w - u` per
/// element; `t` = the 1-based number of this step (the object's step() + 1), for bias correction | |
/// `check(o)` | empty when the hyperparameters are usable, else what is wrong (named, with the value) | |
/// `state_ok(state, D)` | whether one row's state is in the optimizer's domain (load() checks it) | |
/// `state_domain` | that domain in words, for load()'s messages |
///
/// Optional: `gradient_scale(o)` (a float) for a rule with no state whose `step` replaces each
/// gradient element g by num::mul(gradient_scale(o), g) and nothing else (Sgd: the learning
/// rate). Such a rule satisfies `ScalesGradient`, and backward() may then apply the
/// product in its row writes instead of a separate pass (detail/embedding/train.inl: on the
/// host's one-thread path, when no row sum can overflow); the bits are step's.
///
/// `step` is `MPE_HOST_DEVICE` single-source code that follows the numerics contract
/// (num::add/mul/div/sqrt, reductions across D through num::pairwise_sum), so host and GPU
/// give the same bits. `step` must allow `state_in == state_out` (in place: every value read
/// before its own write), as backward() steps a compact (BF16/FP16) row's decoded state in
/// place (mpe/optim/state_precision.hpp). backward() runs it on a copy of the state and applies nothing
/// unless every row's summed gradient and new state are finite and no update is NaN (an
/// update of +-inf saturates into the store format's range, counted).
///
/// Adding an optimizer: one header defining the type and its OptimizerRule, plus one
/// entry in `KnownOptimizers` (optim/all.hpp) so that checkpoints can name it.
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <string>

#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"

namespace mpe {

/// Shortest decimal that reads back as the same float ("1e+30", "0.1", "nan"): for error
/// messages.
inline std::string format_float(float x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

/// Behaviour of optimizer type `Opt` (see the file comment); specialize it next to `Opt`.
template <class Opt>
struct OptimizerRule;

/// An optimizer type with a complete OptimizerRule.
template <class Opt>
concept Optimizer = requires(const Opt& o, const float* state_in, float* state_out, float* g,
                             std::int32_t dim, std::uint64_t t) {
  { OptimizerRule<Opt>::name } -> std::convertible_to<const char*>;
  { OptimizerRule<Opt>::state_domain } -> std::convertible_to<const char*>;
  { OptimizerRule<Opt>::state_floats(dim) } -> std::same_as<std::int64_t>;
  OptimizerRule<Opt>::step(o, state_in, state_out, g, dim, t);
  { OptimizerRule<Opt>::check(o) } -> std::same_as<std::string>;
  { OptimizerRule<Opt>::state_ok(state_in, dim) } -> std::same_as<bool>;
};

/// An optimizer whose rule declares `gradient_scale(o)`: its update is that factor times the
/// summed gradient, element by element, with no state (see the file comment).
template <class Opt>
concept ScalesGradient = Optimizer<Opt> && requires(const Opt& o) {
  { OptimizerRule<Opt>::gradient_scale(o) } -> std::same_as<float>;
};

/// A list of optimizer types, visited by name (checkpoints name an optimizer by
/// OptimizerRule::name).
template <class... Opts>
struct OptimizerList {
  /// Calls `f.template operator()<Opt>()` for the listed optimizer named `name`; returns
  /// false when none is.
  template <class F>
  static bool visit(const std::string& name, F&& f) {
    return ((name == OptimizerRule<Opts>::name ? (f.template operator()<Opts>(), true) : false) || ...);
  }
};

namespace num {
/// base^t by binary exponentiation with correctly rounded products (the same bits on host
/// and device; std::pow is not correctly rounded).
MPE_HOST_DEVICE inline float pow_int(float base, std::uint64_t t) {
  float r = 1.0f, b = base;
  while (t > 0) {
    if (t & 1u) r = mul(r, b);
    b = mul(b, b);
    t >>= 1;
  }
  return r;
}
}  // namespace num

}  // namespace mpe
