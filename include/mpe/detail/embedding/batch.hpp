// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/batch.hpp
/// @brief detail::TableBatch: one batch of a CachedEmbedding (its checked input, dedup,
/// admission and gradient workspace) and its life as a small explicit state
/// (detail::BatchStage), not public.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mpe/backend/buffer.hpp"
#include "mpe/numeric/config.hpp"  // index_t

namespace mpe::detail {

/// Where a TableBatch is in its life. A CachedEmbedding holds three batches: `current_` (the
/// last forward()'s, awaiting backward()), `pending_` (the prefetched one) and `staging_`
/// (the one a call is building); prefetch() and forward() swap them. The transitions, and
/// who makes them:
///
/// - any -> `checked`: prepare_flags() (prefetch() and forward() on staging_, before their
///   checks; restore_pending() on pending_). A failed synchronous check (throw_if_failed's
///   `drop`) sends it back to `empty`.
/// - `checked` -> `prefetched`: prefetch() after its populate (staging_ becomes pending_; the
///   batch pending_ held becomes staging_, `empty`); restore_pending() (load()) without one.
/// - `checked` or `prefetched` -> `awaiting_admission` (EmbeddingConfig::defer_admission: the
///   populate is left to admit_pending()) or `awaiting_backward`: forward() (it becomes
///   current_; the batch current_ held becomes `empty`; a prefetched batch that forward()
///   does not use becomes `empty` too).
/// - `awaiting_admission` -> `awaiting_backward`: admit_pending(), before it populates.
/// - `awaiting_backward` -> `prepared`: prepare_backward() when the step applies (else it
///   stays `awaiting_backward`); a prepare_backward() called again first moves a `prepared`
///   batch back to `awaiting_backward`.
/// - `prepared` -> `awaiting_backward`: apply_prepared_backward(), before it applies.
/// - -> `empty`: backward() and finish_backward() (current_, whether a step applied or not);
///   restore_state() (all three, before restore_pending()).
enum class BatchStage : std::uint8_t {
  empty,               ///< holds no batch (or one that no call reads again)
  checked,             ///< prepare_flags() ran: the input's checks are queued (or passed)
  prefetched,          ///< pending_: populated by prefetch() (or restored by load()), not yet used
  awaiting_admission,  ///< current_: forwarded, its populate owed (defer_admission), awaiting backward()
  awaiting_backward,   ///< current_: forwarded (and admitted), awaiting backward()
  prepared,            ///< current_: prepare_backward() computed a step that applies, not yet applied
};

/// Which dedup of the batch's rows ran (sort_unique), so what its buffers hold.
enum class BatchDedup : std::uint8_t {
  none,    ///< none yet: uniq, seg_start, occ_to_unique are not this batch's
  bitmap,  ///< BitmapUnique (the host on one thread): uniq, occ_to_unique; no sorted_pos, seg_start
  sort,    ///< the sort: uniq, seg_start, occ_to_unique and sorted_pos (the gradient gather needs it)
};

/// One batch of a CachedEmbedding (detail of mpe/embedding/cached_embedding.hpp). Every
/// buffer is in the backend's memory; n = occurrences, U = unique rows, B = bags per table.
template <class Backend>
struct TableBatch {
  using IBuf = Buffer<index_t, Backend>;

  // ---- life ----
  BatchStage stage = BatchStage::empty;
  // prepare_backward()'s optimizer (OptimizerRule::name): apply_prepared_backward() checks it.
  std::string_view prepared_for;
  BatchDedup dedup = BatchDedup::none;
  std::uint64_t id = 0;  // the populate number forward() or prefetch() gave it (lock floors)

  /// forward() ran and backward() has not ended it (admitted, its admission owed, or prepared).
  bool awaiting_backward() const {
    return stage == BatchStage::awaiting_admission || stage == BatchStage::awaiting_backward ||
           stage == BatchStage::prepared;
  }
  /// The admission is still owed: forward() deferred it and the batch still awaits its
  /// backward (admit_pending() makes it; a checkpoint leaves that forward out).
  bool admission_owed() const { return stage == BatchStage::awaiting_admission; }
  /// prefetch() populated it (or load() restored it) and no forward() has used it.
  bool prefetched() const { return stage == BatchStage::prefetched; }
  /// prepare_backward() returned true for it and apply_prepared_backward() has not run.
  bool prepared() const { return stage == BatchStage::prepared; }

  // ---- the forward's and backward's recorded choices (read by the backward) ----
  bool has_coef = false;  // forward(): coef holds per-sample weights or 1/L (else coefficient 1)
  // forward(): the backward sums with ScatterRowGradients (offsets_copy holds its offsets).
  bool scatter = false;
  // prepare_backward(): grad holds the row sums of a ScalesGradient step, AccumulateRows
  // skipped (ApplyRows multiplies by the rule's gradient_scale).
  bool unscaled_sums = false;

  // ---- sizes and buffers ----
  index_t n = 0, B = 0;
  IBuf flags;                // (detail::kNumFlags) ok, skip, U, apply
  IBuf global_rows, bag_of;  // (n) each occurrence's global row and bag
  // (n) sort keys (also the forward's per-occurrence slots), the sort's positions, run heads
  // and their ranks (the bitmap dedup: rank holds its words' ranks)
  IBuf sorted_keys, sorted_pos, heads, rank;
  IBuf uniq, seg_start, occ_to_unique;     // (U) unique rows, (U + 1) their runs, (n) each occurrence's row
  IBuf slot_of_unique, order, admit_rows;  // (U) each unique row's slot, admission order and row
  IBuf indices_copy, offsets_copy;         // (n), (T*B + 1) the input as the call passed it
  // Laned gradient sums (sum_stages): a stage's plan and two stages' scans, (U + 1) each.
  IBuf sum_plan, sum_base[2];
  IBuf occ_at;   // (n) laned gradient sums: each sorted occurrence's grad_output row (SortedOccurrences)
  IBuf evicted;  // (U) laned populate: each dirty victim's row (AdmitSet::evicted)
  Buffer<std::uint64_t, Backend> keys;       // (U) admission sort keys
  Buffer<std::uint64_t, Backend> row_bits;   // (rows / 64) BitmapUnique's bitmap: all zero between calls
  Buffer<std::uint32_t, Backend> estimates;  // (U) the policy's frequency estimates
  Buffer<std::uint8_t, Backend> outcome;     // (U) each unique row's admission / apply outcome
  // coef: (n) per-occurrence coefficient; grad: (U, D) row sums or updates;
  // update: (U, 1 + optimizer state floats)
  Buffer<float, Backend> coef, grad, update;
  Buffer<float, Backend> sum_part[2];  // sum_stages' partial sums of odd / even stages
  Buffer<float, Backend> occ_cf;       // (n) each sorted occurrence's coefficient

  /// Every buffer allocates through `b`.
  void set_backend(const Backend& b) {
    for (IBuf* p : {&flags,          &global_rows, &bag_of,      &sorted_keys,  &sorted_pos,
                    &heads,          &rank,        &uniq,        &seg_start,    &occ_to_unique,
                    &slot_of_unique, &order,       &admit_rows,  &indices_copy, &offsets_copy,
                    &sum_plan,       &sum_base[0], &sum_base[1], &evicted,      &occ_at}) {
      p->set_backend(b);
    }
    occ_cf.set_backend(b);
    sum_part[0].set_backend(b);
    sum_part[1].set_backend(b);
    keys.set_backend(b);
    row_bits.set_backend(b);
    estimates.set_backend(b);
    outcome.set_backend(b);
    coef.set_backend(b);
    grad.set_backend(b);
    update.set_backend(b);
  }

  /// Bytes of every buffer as allocated (memory().workspace_bytes).
  std::size_t bytes() const {
    std::size_t s = 0;
    for (const IBuf* p : {&flags,          &global_rows, &bag_of,      &sorted_keys,  &sorted_pos,
                          &heads,          &rank,        &uniq,        &seg_start,    &occ_to_unique,
                          &slot_of_unique, &order,       &admit_rows,  &indices_copy, &offsets_copy,
                          &sum_plan,       &sum_base[0], &sum_base[1], &evicted,      &occ_at}) {
      s += p->bytes();
    }
    return s + keys.bytes() + row_bits.bytes() + estimates.bytes() + outcome.bytes() + coef.bytes() +
           grad.bytes() + update.bytes() + sum_part[0].bytes() + sum_part[1].bytes() + occ_cf.bytes();
  }
};

}  // namespace mpe::detail
