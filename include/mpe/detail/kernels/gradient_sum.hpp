// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/gradient_sum.hpp
/// @brief The order of a row's gradient sum (groups of kSumGroup, summed level by level) and
/// the functors that compute it with work per thread bounded independently of how often a
/// row occurs: GradientTree (host, streaming), PlanSumStage / SumStage (laned kernels).
///
/// The order (docs/numerics.md, "Gradient sums"): a unique row's k occurrences, in
/// position order, give the level-0 values v_i = c_i * go_i (go_i with no coefficients).
/// Level l + 1 holds one value per group of kSumGroup consecutive level-l values, each the
/// sum of its group from left to right (((x_0 + x_1) + x_2) + ...; a one-value group is
/// that value). The row's sum is the one value of the first level that has one. For
/// k <= kSumGroup this is the plain left-to-right sum over the occurrences; a hot row's
/// sum is a tree of fan-in kSumGroup, so on a GPU its groups are summed in parallel and no
/// thread adds more than kSumGroup terms, however often the row occurs.
#pragma once

#include <cstdint>
#include <vector>

#include "mpe/core/types.hpp"
#include "mpe/detail/kernels/row_accumulate.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"

namespace mpe::detail {

/// Occurrences whose loads a lane of SumStage issues together before adding them in
/// position order (the adds of one element form a chain, the loads need not); more take
/// registers that cost resident warps.
inline constexpr std::int32_t kSumLaneGroup = 4;

/// Values per group of a row's gradient sum at every level (see the file comment). 256:
/// the host's one-thread scatter counts a row's position in its group in one byte.
inline constexpr index_t kSumGroup = 256;

/// Number of level-`level` values of a row with k occurrences: ceil(k / kSumGroup^level).
MPE_HOST_DEVICE inline index_t sum_values_at(index_t k, int level) {
  for (int l = 0; l < level; ++l) k = (k + kSumGroup - 1) / kSumGroup;
  return k;
}

/// Host: the levels above 0 of one row's gradient sum, fed one completed level-0 group at
/// a time (in order), as the host's paths sum a row's occurrences in one pass. Gives the
/// sum of the file comment's order bit for bit.
class GradientTree {
 public:
  explicit GradientTree(std::int32_t D) : D_(D) {}
  /// Adds a completed group sum `x` (D floats) at level `level` >= 1.
  void push(std::size_t level, const float* x) {
    if (acc_.size() <= level) {
      acc_.resize(level + 1);
      count_.resize(level + 1, 0);
      total_.resize(level + 1, 0);
    }
    std::vector<float>& a = acc_[level];
    if (count_[level] == 0) {
      a.assign(x, x + D_);
    } else {
      for (std::int32_t d = 0; d < D_; ++d) a[d] = num::add(a[d], x[d]);
    }
    ++total_[level];
    if (++count_[level] == kSumGroup) {
      count_[level] = 0;
      const std::vector<float> done = a;  // the level above may reallocate acc_
      push(level + 1, done.data());
    }
  }
  /// The row's sum into out (D floats), once every level-0 group has been pushed (the
  /// last, incomplete one included).
  void finish(float* out) {
    for (std::size_t l = 1; l < acc_.size(); ++l) {
      if (total_[l] == 1) {  // the first level with one value: the sum
        for (std::int32_t d = 0; d < D_; ++d) out[d] = acc_[l][d];
        return;
      }
      if (count_[l] > 0) {  // the incomplete last group of this level
        count_[l] = 0;
        const std::vector<float> done = acc_[l];
        push(l + 1, done.data());
      }
    }
  }

 private:
  std::int32_t D_;
  std::vector<std::vector<float>> acc_;  // (levels, D) the open group of each level
  std::vector<index_t> count_, total_;   // values in the open group / ever pushed, per level
};

/// Packs a stage's per-row counts for one exclusive scan: bits 0..31 the row's items (groups
/// summed at this stage), bits 32..62 its partial outputs (its items when the row needs
/// another stage, else 0). Exact: n < 2^31 occurrences.
MPE_HOST_DEVICE inline index_t pack_stage(index_t items, index_t outs) { return items | (outs << 32); }
/// Items part of a packed count or prefix (bits 0..31).
MPE_HOST_DEVICE inline index_t stage_items(index_t packed) { return packed & 0xffffffff; }
/// Partial-outputs part of a packed count or prefix (bits 32..62).
MPE_HOST_DEVICE inline index_t stage_outs(index_t packed) { return packed >> 32; }

/// Stage `stage` >= 1 of the gradient sums (level `stage` from level stage - 1), per unique
/// row u in [0, Ub]: plan[u] = pack_stage(items, outs): a row still open at this stage
/// (stage 1: every row; later: rows with more than one level-(stage-1) value) sums
/// sum_values_at(k, stage) groups, and writes them as partials when there is more than
/// one, else its sum into the (U, D) sums. At stage 1 `items` counts only the groups after
/// the first (the first group of every row is item u of a launch of its own, found without
/// a search). plan[u] = 0 for u >= U (u = Ub makes the exclusive scan's last entry the
/// totals).
struct PlanSumStage {
  const index_t* seg_start;  // (U + 1)
  const index_t* count;      // (1) U
  int stage;
  index_t* plan;  // (Ub + 1)
  MPE_HOST_DEVICE void operator()(index_t u) const {
    if (u >= *count) {
      plan[u] = 0;
      return;
    }
    const index_t k = seg_start[u + 1] - seg_start[u];
    const bool open = stage == 1 || sum_values_at(k, stage - 1) > 1;
    const index_t items = open ? sum_values_at(k, stage) : 0;
    plan[u] = pack_stage(stage == 1 ? items - 1 : items, items > 1 ? items : 0);
  }
};

/// Per sorted occurrence k (sum_stages, before the stages): the offset of its bag's row in
/// grad_output, (b * T + t) * D, and its coefficient, so that SumStage reads both in sorted
/// order instead of through sorted_pos and a gather of bag_of (one dependent random load
/// fewer per group). Does nothing when the batch failed validation.
struct SortedOccurrences {
  const index_t* sorted_pos;  // (n)
  const index_t* bag_of;      // (n)
  const float* coef;          // (n), or null for plain sum pooling
  index_t B, T;
  std::int32_t D;
  index_t* at;          // (n) out
  float* cf;            // (n) out, where coef is not null
  const index_t* gate;  // ok flag of the batch, or null
  MPE_HOST_DEVICE void operator()(index_t k) const {
    if (!open(gate)) return;
    const index_t i = sorted_pos[k];
    index_t t, b;
    split_bag(bag_of[i], B, t, b);
    at[k] = (b * T + t) * D;
    if (coef) cf[k] = coef[i];
  }
};

/// Stage `stage` of the gradient sums, one laned item per group (lanes across D in
/// kLaneChunk chunks; a warp per group on a GPU): item w is group j of row u, from the
/// stage's scanned plan (`base`) by binary search, except in stage 1's launch of first
/// groups (`first_groups`: item u is group 0 of row u). Stage 1 sums the group's occurrences
/// (grad_output rows gathered in sorted position order through SortedOccurrences' offsets,
/// times their coefficients); later
/// stages sum the group's partials of the stage before (`part_in`, the row's partials from
/// stage_outs(prev_base[u])). The group's sum goes to the row's sums (its last stage) or to
/// `part_out` at stage_outs(base[u]) + j. No lane adds more than kSumGroup terms.
///
/// With `check_sums`, each written row sum is tested: a non-finite element records u in
/// rec->pos[kOverflow] (atomic_min), when grad_output passed its own check
/// (rec->pos[kGrad]): what AccumulateRows records for an optimizer whose update is the
/// gradient times a finite factor (ScalesGradient), so that pass can be left out. Does
/// nothing when the batch failed validation.
struct SumStage {
  int stage;
  index_t Ub;                // rows planned (base has Ub + 1 entries)
  const index_t* base;       // (Ub + 1) exclusive scan of PlanSumStage's plan for this stage
  const index_t* prev;       // (Ub + 1) the previous stage's scan (stage >= 2), else null
  const index_t* seg_start;  // (U + 1)
  const index_t* occ_at;     // (n) SortedOccurrences: sorted occurrence k's row offset in grad_output
  const float* occ_cf;       // (n) its coefficient, or null for plain sum pooling (coefficient 1)
  const float* grad_output;  // (B, T*D)
  std::int32_t D;
  const float* part_in;  // (previous stage's partials, D) or null at stage 1
  float* part_out;       // (this stage's partials, D)
  float* grad;           // (U, D) the summed gradients
  CallRecord* rec;
  const index_t* gate;  // ok flag of the batch, or null
  bool check_sums = false;
  bool first_groups = false;       // stage 1: item u = group 0 of row u
  const index_t* count = nullptr;  // (1) U (first_groups)

  /// Offset into grad_output of the row of sorted occurrence k, and its coefficient in `cf`.
  MPE_HOST_DEVICE index_t occurrence(index_t k, float& cf) const {
    cf = occ_cf ? occ_cf[k] : 1.0f;
    return occ_at[k];
  }

  MPE_HOST_DEVICE void operator()(index_t w, std::int32_t lane, std::int32_t lanes) const {
    if (!open(gate)) return;
    index_t u = w, j = 0;
    if (first_groups) {
      if (u >= *count) return;
    } else {
      if (w >= stage_items(base[Ub])) return;
      // The row u with stage_items(base[u]) <= w < stage_items(base[u + 1]).
      index_t lo = 0, hi = Ub;  // invariant: items(base[lo]) <= w < items(base[hi])
      while (hi - lo > 1) {
        MPE_TRIP();
        const index_t mid = lo + (hi - lo) / 2;
        if (stage_items(base[mid]) <= w) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      u = lo;
      j = w - stage_items(base[u]) + (stage == 1 ? 1 : 0);  // stage 1: groups after the first
    }
    const index_t k = seg_start[u + 1] - seg_start[u];
    const index_t values = sum_values_at(k, stage - 1);  // inputs of the row at this stage
    const index_t first = j * kSumGroup;
    const index_t last = first + kSumGroup < values ? first + kSumGroup : values;
    const bool final_sum = sum_values_at(k, stage) == 1;
    float* out = final_sum ? grad + u * D : part_out + (stage_outs(base[u]) + j) * D;
    bool finite = true;
    for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
      const std::int32_t m = D - c < kLaneChunk ? D - c : kLaneChunk;
      float acc[kLaneChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (stage == 1) {
        sum_occurrences(seg_start[u] + first, seg_start[u] + last, c, m, acc);
      } else {
        const float* in = part_in + (stage_outs(prev[u]) + first) * D + c;
        for (index_t q = first; q < last; ++q, in += D) {
          MPE_TRIP();
          float x[kLaneChunk];
          load_lane_chunk(in, m, x);
          MPE_UNROLL
          for (std::int32_t e = 0; e < kLaneChunk; ++e) {
            if (e < m) acc[e] = q == first ? x[e] : num::add(acc[e], x[e]);
          }
        }
      }
      store_lane_chunk(out + c, m, acc);
      for (std::int32_t e = 0; e < m; ++e) finite = finite && num::is_finite(acc[e]);
    }
    if (check_sums && final_sum && !finite && rec->pos[kGrad] == kNoError)
      atomic_min(&rec->pos[kOverflow], u);
  }

  /// acc[e] = the left-to-right sum of occurrences [k0, k1) (sorted order) of element c + e,
  /// e < m: every load of kSumLaneGroup occurrences is issued before their adds, which stay
  /// in position order.
  MPE_HOST_DEVICE void sum_occurrences(index_t k0, index_t k1, std::int32_t c, std::int32_t m,
                                       float* acc) const {
    for (index_t g = k0; g < k1; g += kSumLaneGroup) {
      index_t at[kSumLaneGroup];
      float cf[kSumLaneGroup];
      float x[kSumLaneGroup][kLaneChunk];
      MPE_UNROLL
      for (std::int32_t q = 0; q < kSumLaneGroup; ++q) {
        MPE_TRIP();
        at[q] = 0;
        cf[q] = 0.0f;
        if (g + q < k1) at[q] = occurrence(g + q, cf[q]) + c;
      }
#ifdef __CUDA_ARCH__
      // Whole 16-byte-aligned chunks (every one, for D % 4 == 0): the group's loads as float4s
      // with no branch between them (at[q] = 0, a valid offset, past the segment's end, whose
      // values the adds below never reach).
      bool whole = m == kLaneChunk;
      MPE_UNROLL
      for (std::int32_t q = 0; q < kSumLaneGroup; ++q)
        whole = whole && (reinterpret_cast<std::uintptr_t>(grad_output + at[q]) & 15u) == 0;
      if (whole) {
        MPE_UNROLL
        for (std::int32_t q = 0; q < kSumLaneGroup; ++q) load_float4(grad_output + at[q], x[q]);
      } else
#endif
      {
        MPE_UNROLL
        for (std::int32_t q = 0; q < kSumLaneGroup; ++q)
          load_lane_chunk(grad_output + at[q], g + q < k1 ? m : 0, x[q]);
      }
      MPE_UNROLL
      for (std::int32_t q = 0; q < kSumLaneGroup; ++q) {
        if (g + q >= k1) break;
        const bool head = g + q == k0;
        MPE_UNROLL
        for (std::int32_t e = 0; e < kLaneChunk; ++e) {
          if (occ_cf) {
            acc[e] = head ? num::mul(cf[q], x[q][e]) : num::add(acc[e], num::mul(cf[q], x[q][e]));
          } else {
            acc[e] = head ? x[q][e] : num::add(acc[e], x[q][e]);
          }
        }
      }
    }
  }
};

/// Searched items and partial rows to reserve for stage `stage` of a batch of n occurrences
/// and at most Ub unique rows: stage 1 sums at most n / kSumGroup groups after the rows'
/// first groups (which have a launch of their own: Ub items), and a later stage only rows
/// with more than kSumGroup^(stage-1) occurrences, at most n / kSumGroup^(stage-1) of them;
/// each stage writes at most 2 n / kSumGroup^stage + 1 partials. 0 items when no row can
/// reach the stage (n <= kSumGroup^(stage-1)).
inline void sum_stage_bounds(index_t n, index_t Ub, int stage, index_t& items, index_t& partials) {
  index_t g = 1;  // kSumGroup^(stage-1)
  for (int s = 1; s < stage; ++s) g = g > n ? g : g * kSumGroup;
  if (stage > 1 && n <= g) {
    items = partials = 0;
    return;
  }
  const index_t gs = g * kSumGroup;
  (void)Ub;
  items = stage == 1 ? n / kSumGroup + 1 : n / gs + n / g + 2;
  partials = 2 * (n / gs) + 1;
}

}  // namespace mpe::detail
