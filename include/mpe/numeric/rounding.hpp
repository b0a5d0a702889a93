// SPDX-License-Identifier: Apache-2.0
/// @file mpe/numeric/rounding.hpp
/// @brief Rounding policies: how a value measured in grid steps becomes an integer
/// number of steps. Used by every quantizer (Int8/Int4 codes, FP16/BF16 mantissas).
///
/// A policy is a type with `static constexpr bool stochastic`, a `name`, and
/// `MPE_HOST_DEVICE static float round(float v, std::uint32_t random_word)` returning
/// an integer-valued float. Nearest ignores the random word (and callers skip drawing).
#pragma once

#include <concepts>
#include <cstdint>

#include "mpe/numeric/float_ops.hpp"

namespace mpe {

/// Round half to even (IEEE default). Deterministic, biased towards the grid for
/// updates smaller than half a step (they vanish), which is why training prefers
/// StochasticRounding.
struct NearestRounding {
  static constexpr bool stochastic = false;       ///< deterministic: callers draw no random words
  static constexpr const char* name = "nearest";  ///< policy name (messages, checkpoints, benchmarks)
  /// `v` rounded to the nearest integer, ties to even (num::rint_even); the random word is
  /// ignored. Returns an integer-valued float.
  MPE_HOST_DEVICE static float round(float v, std::uint32_t /*random_word*/) { return num::rint_even(v); }
};

/// Stochastic rounding: v rounds up with probability frac(v), using the top 24 bits of
/// the random word as u in [0, 1) on a 2^-24 grid. Unbiased: |E[round(v)] - v| < 2^-24
/// (zero when frac(v) is a multiple of 2^-24). Source of the technique: Gupta et al.,
/// "Deep learning with limited numerical precision", ICML 2015.
struct StochasticRounding {
  static constexpr bool stochastic = true;  ///< callers draw one Philox word per element (num::RowRng)
  static constexpr const char* name = "stochastic";  ///< policy name (messages, checkpoints, benchmarks)
  /// floor(v) + 1 when u < frac(v), else floor(v), with u = (random_word >> 8) * 2^-24
  /// (the word's top 24 bits); every step is exact. Returns an integer-valued float.
  MPE_HOST_DEVICE static float round(float v, std::uint32_t random_word) {
    const float fl = num::floor(v);
    const float frac = num::sub(v, fl);                                        // exact
    const float u = num::mul(static_cast<float>(random_word >> 8), 0x1p-24f);  // exact
    return num::add(fl, static_cast<float>(u < frac));  // branch-free: the outcome is random
  }
};

/// A rounding policy: checked at compile time so a wrong type fails readably.
template <class R>
concept RoundingPolicy = requires(float v, std::uint32_t r) {
  { R::stochastic } -> std::convertible_to<bool>;
  { R::name } -> std::convertible_to<const char*>;
  { R::round(v, r) } -> std::same_as<float>;
};

namespace detail {
/// Round toward +infinity (internal: FP16 scale of Int4 rows).
struct RoundUp {
  static constexpr bool stochastic = false;
  static constexpr const char* name = "up";
  MPE_HOST_DEVICE static float round(float v, std::uint32_t) {
    const float f = num::floor(v);
    return f == v ? f : num::add(f, 1.0f);
  }
};
/// Round toward -infinity (internal: FP16 bias of Int4 rows).
struct RoundDown {
  static constexpr bool stochastic = false;
  static constexpr const char* name = "down";
  MPE_HOST_DEVICE static float round(float v, std::uint32_t) { return num::floor(v); }
};
}  // namespace detail

/// A list of rounding policies (a type list: see KnownRoundings).
template <class... Roundings>
struct RoundingList {};

/// The rounding policies a store write may use.
using KnownRoundings = RoundingList<StochasticRounding, NearestRounding>;

}  // namespace mpe
