// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/scatter_gradients.hpp
/// @brief backward()'s gradient sums on one host thread (not public): ScatterRowGradients,
/// which reads grad_output once in memory order, the one-lane step it shares with
/// SumRowGradients (add_occurrence), and the bound that lets Sgd skip AccumulateRows
/// (sums_cannot_overflow). The same sums as gradient_sum.hpp's order, bit for bit.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "mpe/core/types.hpp"
#include "mpe/detail/kernels/gradient_sum.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/detail/kernels/prefetch.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"

namespace mpe::detail {

/// Records in *bad the position of the first non-finite value of x[0, m), offset by `base`
/// (atomic_min: the smallest such position over all callers), and raises `largest` to the
/// largest magnitude of x[0, m) as a bit pattern, bits(|x|) (ordered as |x| for
/// non-negative floats; a NaN is above +inf). A branch-free test of the whole run first (a
/// finite run is the common case; all_finite's test), then the position.
MPE_HOST_DEVICE inline void check_finite_run(const float* x, std::int32_t m, index_t base, index_t* bad,
                                             std::uint32_t& largest) {
  std::uint32_t acc = 0, hi = largest;
  for (std::int32_t d = 0; d < m; ++d) {
    const std::uint32_t a = num::float_bits(x[d]) & 0x7fffffffu;
    acc |= a + 0x00800000u;
    hi = hi > a ? hi : a;
  }
  largest = hi;
  if ((acc >> 31) == 0) return;
  for (std::int32_t d = 0; d < m; ++d) {
    if (!num::is_finite(x[d])) {
      atomic_min(bad, base + d);
      return;
    }
  }
}

/// check_finite_run without the largest magnitude (the unused maximum compiles away).
MPE_HOST_DEVICE inline void check_finite_run(const float* x, std::int32_t m, index_t base, index_t* bad) {
  std::uint32_t unused = 0;
  check_finite_run(x, m, base, bad, unused);
}

/// Whether no row sum of ScatterRowGradients can overflow, given its `magnitude` output ((2):
/// bits(max |grad_output|), bits(max |coefficient|)) and n occurrences, so that
/// AccumulateRows' overflow check would find nothing: each added term c * g is at most
/// 2^100 (1 + 2^-24) in magnitude when max|c| * max|g| <= 2^100, and a sum of k <= n < 2^24
/// terms, each partial sum rounded up by at most a factor 1 + 2^-24, stays below
/// 2^24 * 2^100 * e < 2^126 < FLT_MAX. False for a non-finite magnitude (NaN, inf) and for
/// n >= 2^24.
inline bool sums_cannot_overflow(const std::uint32_t* magnitude, index_t n) {
  if (n >= (index_t{1} << 24)) return false;
  const double g = num::bits_float(magnitude[0]), c = num::bits_float(magnitude[1]);
  return g * c <= 0x1p100;
}

/// Adds one occurrence's grad_output row `go` (D) into the row sum g (D): g = c * go (or go
/// with no coefficients) for the row's first occurrence, else g + c * go (g + go). The
/// one-lane step of SumRowGradients and ScatterRowGradients: mul(1, x) == x, so leaving
/// the multiply out for coefficient 1 keeps the bits.
MPE_HOST_DEVICE inline void add_occurrence(float* g, const float* go, std::int32_t D, const float* coef,
                                           float c, bool first) {
  if (coef) {
    if (first) {
      for (std::int32_t d = 0; d < D; ++d) g[d] = num::mul(c, go[d]);
    } else {
      for (std::int32_t d = 0; d < D; ++d) g[d] = num::add(g[d], num::mul(c, go[d]));
    }
  } else if (first) {
    for (std::int32_t d = 0; d < D; ++d) g[d] = go[d];
  } else {
    for (std::int32_t d = 0; d < D; ++d) g[d] = num::add(g[d], go[d]);
  }
}

/// Host, one thread: SumRowGradients and CheckEmptyBagGrads in one pass that reads
/// grad_output in memory order (sample b, then table t) instead of gathering its rows in
/// sorted order, adding each occurrence's row into its unique row's sum (`grad`, (U, D)).
/// The same sums, bit for bit: a unique row belongs to one table, whose bags this order
/// visits in increasing b, i.e. in increasing position, so every row's occurrences are
/// added in position order as the gather does; the first occurrence of each group of
/// kSumGroup sets the sum (started[u] counts the row's position in its group), and a
/// completed group of a hot row goes up its GradientTree (gradient_sum.hpp's order).
/// Every value of grad_output is tested once, the first non-finite one (the smallest
/// position: memory order) going to rec->pos[kGrad]. Launch one item. Does nothing when
/// the batch failed validation. The sum rows of the first occurrences of the bag
/// kScatterAhead bags ahead are prefetched (a random row of the (U, D) sums each), and the
/// grad_output row kGradAhead bags ahead in memory order (8 KiB ahead at D = 64: the
/// first read of each grad_output row is where this loop waits, and 32 bags ahead covers
/// that latency on current x86-64 hosts without evicting the rows still in use). With
/// `magnitude` set, the largest |grad_output| and |coefficient| are written for
/// sums_cannot_overflow. Paths::run_wide runs the loops (HostPaths: compiled for AVX2 where
/// it is on; the same element-wise adds and multiplies).
template <class Paths = PortablePaths>
struct ScatterRowGradients {
  const index_t* offsets;        // (B * T + 1) the forward's CSR offsets
  const index_t* occ_to_unique;  // (n)
  const float* coef;             // (n), or null for plain sum pooling (coefficient 1)
  const float* grad_output;      // (B, T*D)
  index_t B, T;
  std::int32_t D;
  float* grad;  // (U, D) workspace: the summed gradient
  // (U) zeros on entry: each row's occurrences added so far modulo kSumGroup (0: the next
  // one starts a group of the order of gradient_sum.hpp)
  std::uint8_t* started;
  CallRecord* rec;      // rec->pos[kGrad]
  const index_t* gate;  // ok flag of the batch, or null
  // (2) out, or null: bits(max |grad_output|) and bits(max |coef|) (bits(1) without coef),
  // as check_finite_run orders magnitudes; what sums_cannot_overflow tests.
  std::uint32_t* magnitude = nullptr;
  // Rows with more than kSumGroup occurrences (GradientTree per row), empty on entry and exit.
  std::unordered_map<index_t, GradientTree>* hot = nullptr;
  static_assert(kSumGroup == 256, "started counts a row's position in its group in one byte");
  static constexpr index_t kScatterAhead = 8;      // bags: sum rows prefetched
  static constexpr index_t kScatterAheadRows = 4;  // first occurrences of that bag prefetched
  static constexpr index_t kGradAhead = 32;        // bags: grad_output rows prefetched (memory order)

  void operator()(index_t) const {
    if (!open(gate)) return;
    Paths::run_wide(*this);
  }
  /// The pass (inlined always, so Paths::run_wide compiles it for its target).
  [[gnu::always_inline]] inline void run() const {
    // Members in locals: the loop's byte stores (started) may alias any memory, so the
    // compiler would reload members through `this` after each one.
    const index_t* const offsets = this->offsets;
    const index_t* const occ_to_unique = this->occ_to_unique;
    const float* const coef = this->coef;
    const float* const grad_output = this->grad_output;
    float* const grad = this->grad;
    std::uint8_t* const started = this->started;
    const index_t B = this->B, T = this->T;
    const std::int32_t D = this->D;
    index_t* bad = &rec->pos[kGrad];
    const auto row_bytes = static_cast<std::size_t>(D) * sizeof(float);
    const index_t end_go = B * T * D;
    std::uint32_t go_max = 0, coef_max = coef ? 0u : 0x3f800000u;  // bits(0); bits(1): no coefficients
    // The bag kScatterAhead bags ahead in (b, t) order: sample ab, table at.
    index_t ab = kScatterAhead / T, at = kScatterAhead % T;
    for (index_t b = 0; b < B; ++b) {
      for (index_t t = 0; t < T; ++t) {
        if (ab < B) {
          const index_t j2 = at * B + ab;
          const index_t e2 = offsets[j2 + 1] < offsets[j2] + kScatterAheadRows
                                 ? offsets[j2 + 1]
                                 : offsets[j2] + kScatterAheadRows;
          for (index_t i2 = offsets[j2]; i2 < e2; ++i2)
            prefetch_lines(grad + occ_to_unique[i2] * D, row_bytes);
          if (++at == T) {
            at = 0;
            ++ab;
          }
        }
        const index_t j = t * B + b, at_go = (b * T + t) * D;
        const float* go = grad_output + at_go;
        if (at_go + kGradAhead * D < end_go) prefetch_lines(go + kGradAhead * D, row_bytes);
        check_finite_run(go, D, at_go, bad, go_max);
        for (index_t i = offsets[j]; i < offsets[j + 1]; ++i) {
          const index_t u = occ_to_unique[i];
          const float c = coef ? coef[i] : 1.0f;
          const std::uint32_t ca = num::float_bits(c) & 0x7fffffffu;
          coef_max = coef_max > ca ? coef_max : ca;
          add_occurrence(grad + u * D, go, D, coef, c, started[u] == 0);
          if (++started[u] == 0) hot_group(u);  // the row's kSumGroup-th occurrence
        }
      }
    }
    if (magnitude) {
      magnitude[0] = go_max;
      magnitude[1] = coef_max;
    }
    finish_hot_rows();
  }
  /// Row u's sum completed a group of kSumGroup occurrences (its position counter wrapped
  /// to 0): the group goes up its GradientTree, and the row's next occurrence starts a new
  /// group in `grad`.
  void hot_group(index_t u) const {
    auto it = hot->find(u);
    if (it == hot->end()) it = hot->emplace(u, GradientTree(D)).first;
    it->second.push(1, grad + u * D);
  }
  /// Each hot row's sum: its last, incomplete group (if any) pushed, then its tree's sum
  /// into `grad`.
  void finish_hot_rows() const {
    for (auto& [u, tree] : *hot) {
      if (started[u] != 0) tree.push(1, grad + u * D);
      tree.finish(grad + u * D);
    }
    hot->clear();
  }
};

/// Backward, first pass, part 2, for unique row u (after SumRowGradients):

}  // namespace mpe::detail
