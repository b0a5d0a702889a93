// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/train.inl
/// @brief CachedEmbedding: backward (the optimizer's two passes) and flush (included by
/// mpe/embedding/cached_embedding.hpp).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "mpe/detail/kernels/all.hpp"

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
template <Optimizer Opt>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::backward(
    std::span<const float> grad_output, const Opt& optimizer) {
  if (prepare_backward(grad_output, optimizer)) apply_backward(optimizer);
  current_.stage = detail::BatchStage::empty;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
template <Optimizer Opt>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::apply_prepared_backward(
    const Opt& optimizer) {
  if (!current_.prepared()) {
    throw std::logic_error(detail::ce_prefix("apply_prepared_backward") +
                           "no prepare_backward() step that applies is waiting (prepare_backward() "
                           "returned false, threw, or was not called since the last forward())");
  }
  if (current_.prepared_for != std::string_view(OptimizerRule<Opt>::name)) {
    throw std::logic_error(detail::ce_prefix("apply_prepared_backward") + "the step was prepared for " +
                           std::string(current_.prepared_for) + ", not " + OptimizerRule<Opt>::name);
  }
  current_.stage = detail::BatchStage::awaiting_backward;
  apply_backward(optimizer);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::finish_backward() noexcept {
  current_.stage = detail::BatchStage::empty;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::count_skipped_step() {
  backend_.for_each(1, detail::AddCount{&counters_.data()->stats.skipped_steps, 1});
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
template <Optimizer Opt>
bool CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::prepare_backward(
    std::span<const float> grad_output, const Opt& optimizer) {
  using Rule = OptimizerRule<Opt>;
  const char* fn = "backward";
  ++call_seq_;
  Batch& b = current_;
  if (b.prepared()) b.stage = detail::BatchStage::awaiting_backward;  // prepared again
  if (!b.awaiting_backward()) {
    throw std::logic_error(detail::ce_prefix(fn) + "no forward() is awaiting backward()");
  }
  if (!opt_name_.empty() && opt_name_ != Rule::name) {
    throw std::logic_error(detail::ce_prefix(fn) + "the optimizer changed from " + opt_name_ + " to " +
                           Rule::name +
                           "; one table trains with one optimizer (its state is the optimizer's)");
  }
  if (const std::string bad = Rule::check(optimizer); !bad.empty()) detail::invalid(fn, bad);
  const index_t T = num_tables();
  const auto expect = static_cast<std::size_t>(b.B * T * config_.dim);
  if (grad_output.size() != expect) {
    detail::invalid(fn, "grad_output.size() = " + std::to_string(grad_output.size()) +
                            "; expected B*T*D = " + std::to_string(expect));
  }
  // EmbeddingConfig::defer_admission: the batch's populate, which its forward() left (it
  // runs whatever the gradient holds, as it would have in the forward).
  admit_pending();
  detail::CallRecord* rec = record_.data();
  detail::Counters* counters = counters_.data();
  backend_.for_each(1, detail::ResetRecord{rec});
  // First pass: every row's summed gradient, update and new optimizer state into
  // workspace, checked for overflow before anything is written (one verdict per call).
  if (b.dedup == detail::BatchDedup::none) sort_unique(b, b.scatter);  // the gather path needs sorted_pos
  const index_t U = unique_bound(b);
  const index_t* count = b.flags.data() + detail::kFlagU;
  const std::int64_t S = Rule::state_floats(config_.dim);
  b.grad.reserve_discard(static_cast<std::size_t>(U) * config_.dim);
  b.update.reserve_discard(static_cast<std::size_t>(U * S));
  b.outcome.reserve_discard(static_cast<std::size_t>(U));
  // The gradient sums in gradient_sum.hpp's order, with grad_output's finiteness check (the
  // smallest non-finite position on every path). Same bits on every path.
  const index_t* ok = b.flags.data() + detail::kFlagOk;
  b.unscaled_sums = false;
  if constexpr (host_paths) {
    std::uint32_t magnitude[2] = {0xffffffffu, 0};  // ScatterRowGradients' largest |grad_output|, |coef|
    if (b.scatter) {
      // One thread (chosen by the forward, which kept its offsets): grad_output read once in
      // memory order, checked as it is read. `outcome` serves as the rows' group positions
      // (ApplyRows writes every outcome afterwards).
      std::unordered_map<index_t, detail::GradientTree> hot;
      backend_.fill_bytes(b.outcome.data(), 0, static_cast<std::size_t>(U));
      backend_.for_each(1, detail::ScatterRowGradients<Paths>{
                               b.offsets_copy.data(), b.occ_to_unique.data(),
                               b.has_coef ? b.coef.data() : nullptr, grad_output.data(), b.B, T, config_.dim,
                               b.grad.data(), b.outcome.data(), rec, ok, magnitude, &hot});
    } else {
      // More threads: the check fused into SumRowGradients, plus the bags without occurrences.
      backend_.for_each(b.n + 1, detail::CheckEmptyBagGrads{b.bag_of.data(), b.n, grad_output.data(), b.B, T,
                                                            config_.dim, &rec->pos[detail::kGrad], ok});
      backend_.for_each_lanes(
          U, detail::SumRowGradients{b.seg_start.data(), b.sorted_pos.data(), b.bag_of.data(),
                                     b.has_coef ? b.coef.data() : nullptr, grad_output.data(), b.B, T,
                                     config_.dim, b.grad.data(), rec, count, ok, b.n});
    }
    // A ScalesGradient optimizer (Sgd) on the scatter path: when no row sum can overflow (a
    // bound from the largest |grad_output| and |coefficient| the scatter read), AccumulateRows
    // would record nothing and only multiply by the rule's gradient_scale; ApplyRows does that
    // multiply instead (the same num::mul), saving a pass over the (U, D) sums.
    // sums_cannot_overflow is false for a non-finite grad_output, so that error still goes
    // through AccumulateRows and SealBackward as before.
    if constexpr (ScalesGradient<Opt>) {
      b.unscaled_sums = S == 0 && b.scatter && detail::sums_cannot_overflow(magnitude, b.n);
    }
  } else {
    // Other backends (a GPU): one coalesced pass over all of grad_output, then the laned
    // stages. For a ScalesGradient optimizer the stages test every sum as AccumulateRows
    // would (SumStage::check_sums), and the apply pass multiplies by gradient_scale.
    backend_.for_each(static_cast<index_t>(grad_output.size()),
                      detail::CheckFinite{grad_output.data(), &rec->pos[detail::kGrad]});
    sum_stages(b, grad_output.data(), ScalesGradient<Opt> && S == 0);
    b.unscaled_sums = ScalesGradient<Opt> && S == 0;
  }
  if (!b.unscaled_sums) {
    backend_.for_each(U,
                      detail::AccumulateRows<Opt>{b.uniq.data(), config_.dim, optimizer,
                                                  opt_name_.empty() || StatePrecision::cached
                                                      ? nullptr
                                                      : reinterpret_cast<const float*>(opt_state_.data()),
                                                  b.grad.data(), b.update.data(), step_ptr(), rec, count,
                                                  b.flags.data() + detail::kFlagOk, state_ref(), cache_ref(),
                                                  num_sets_ > 0 ? b.slot_of_unique.data() : nullptr});
  }
  backend_.for_each(
      1, detail::SealBackward{rec, grad_output.data(), b.uniq.data(), b.occ_to_unique.data(), b.n,
                              b.grad.data(), b.update.data(), config_.dim, S, skip_non_finite(),
                              b.flags.data(), &counters->stats.skipped_steps,
                              deferred() ? deferred_.data() : nullptr, static_cast<index_t>(call_seq_)});
  bool apply = true;  // unknown (gated on the backend) under Validation::Deferred
  if (!deferred()) {
    const detail::CallRecord r = read_record(rec);  // the one wait of this call
    throw_if_failed(fn, r, skip_non_finite(), nullptr);
    apply = r.apply != 0;
  } else if constexpr (!Backend::asynchronous) {
    apply = read_scalar(b.flags.data() + detail::kFlagApply) != 0;
  }
  b.stage = apply ? detail::BatchStage::prepared : detail::BatchStage::awaiting_backward;
  b.prepared_for = Rule::name;
  return apply;  // false: skipped (NonFinite::Skip, counted on the backend) or a failed batch
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
template <Optimizer Opt>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::apply_backward(
    const Opt& optimizer) {
  using Rule = OptimizerRule<Opt>;
  (void)optimizer;
  Batch& b = current_;
  detail::Counters* counters = counters_.data();
  const index_t U = unique_bound(b);
  const index_t* count = b.flags.data() + detail::kFlagU;
  const std::int64_t S = Rule::state_floats(config_.dim);
  if (opt_name_.empty()) {  // the first applied step allocates the state (zeros)
    if (S > 0) {            // all-zero bytes are 0.0 in every state precision
      // The sizes planned_memory() counts (detail::EmbeddingLayout).
      opt_state_.reset(detail::EmbeddingLayout::state_bytes(total_rows_, S, StatePrecision::value_bytes));
      backend_.fill_bytes(opt_state_.data(), 0, opt_state_.bytes());
      if (const std::size_t n = detail::EmbeddingLayout::cached_state_floats(
              static_cast<std::size_t>(cache_slots()), S, StatePrecision::cached);
          n > 0) {
        cache_state_.reset(n);
        backend_.fill_bytes(cache_state_.data(), 0, cache_state_.bytes());
      }
    }
    opt_name_ = Rule::name;
  }
  const index_t* gate = b.flags.data() + detail::kFlagApply;
  [[maybe_unused]] float scale = 0.0f;
  const float* lr = nullptr;  // set: b.grad holds the row sums, not the updates (prepare_backward)
  if constexpr (ScalesGradient<Opt>) {
    if (b.unscaled_sums) {
      scale = Rule::gradient_scale(optimizer);
      lr = &scale;
    }
  }
  // The FP32 optimizer state (rows, S), or null (S = 0, or a compact state precision).
  float* const fp32_state =
      S > 0 && !StatePrecision::cached ? reinterpret_cast<float*>(opt_state_.data()) : nullptr;
  if constexpr (!host_paths) {
    if (!state_ref().active() && (S == 0 || fp32_state)) {
      // Laned (a warp per row on a GPU): the cached rows and the store rows' new values
      // (and the FP32 state), then the store rows quantized, each lane on its element groups.
      // `lr` set: b.grad holds the summed gradients, else AccumulateRows' updates (and
      // b.update the rows' new state).
      backend_.fill_bytes(b.outcome.data(), 0, static_cast<std::size_t>(U));
      detail::ApplyScaledLanes<Storage> part{b.uniq.data(),
                                             num_sets_ > 0 ? b.slot_of_unique.data() : nullptr,
                                             cache_ref(),
                                             store_.data(),
                                             stride_,
                                             config_.dim,
                                             b.grad.data(),
                                             lr ? *lr : 0.0f,
                                             b.outcome.data(),
                                             count,
                                             gate};
      if (!lr) {
        part.scaled = false;
        part.state_floats = S;
        part.opt_state = fp32_state;
        part.new_state = S > 0 ? b.update.data() : nullptr;
      }
      part.growth = config_.max_range_growth;
      const detail::StoreScaledLanes<Storage, Rounding> store{part, store_.data(), row_stream(), step_ptr()};
      if constexpr (warp_lanes<Backend> && LanedStore<Storage>) {
        backend_.for_each_lanes(U, detail::ApplyStoreScaledLanes<Storage, Rounding>{store});  // one pass
      } else {
        backend_.for_each_lanes(U, part);
        backend_.for_each_lanes(U, store);
      }
      backend_.reduce_to(U, detail::CountOutcome{b.outcome.data(), count, gate}, &counters->tally);
      backend_.for_each(1, detail::FoldCounts{counters, detail::Fold::Backward, 0, nullptr, 0, gate});
      return;
    }
  }
  backend_.for_each(
      U, detail::ApplyRows<Storage, Rounding, Paths>{
             b.uniq.data(), num_sets_ > 0 ? b.slot_of_unique.data() : nullptr, cache_ref(), store_.data(),
             stride_, config_.dim, S, fp32_state, b.grad.data(), b.update.data(), row_stream(), step_ptr(),
             b.outcome.data(), count, gate, state_ref(), lr, config_.max_range_growth});
  backend_.reduce_to(U, detail::CountOutcome{b.outcome.data(), count, gate}, &counters->tally);
  backend_.for_each(1, detail::FoldCounts{counters, detail::Fold::Backward, 0, nullptr, 0, gate});
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::sum_stages(Batch& b,
                                                                                    const float* grad_output,
                                                                                    bool check_sums) {
  const index_t Ub = unique_bound(b);
  const index_t* count = b.flags.data() + detail::kFlagU;
  const auto rows = static_cast<std::size_t>(Ub) + 1;
  b.sum_plan.reserve_discard(rows);
  b.occ_at.reserve_discard(static_cast<std::size_t>(b.n));
  if (b.has_coef) b.occ_cf.reserve_discard(static_cast<std::size_t>(b.n));
  backend_.for_each(b.n, detail::SortedOccurrences{
                             b.sorted_pos.data(), b.bag_of.data(), b.has_coef ? b.coef.data() : nullptr, b.B,
                             num_tables(), config_.dim, b.occ_at.data(),
                             b.has_coef ? b.occ_cf.data() : nullptr, b.flags.data() + detail::kFlagOk});
  for (int stage = 1;; ++stage) {
    index_t items = 0, partials = 0;
    detail::sum_stage_bounds(b.n, Ub, stage, items, partials);
    if (items == 0) break;
    const int cur = stage & 1, prev = cur ^ 1;
    IBuf& base = b.sum_base[cur];
    base.reserve_discard(rows);
    auto& part = b.sum_part[cur];
    if (stage > 1 || partials > 1) part.reserve_discard(static_cast<std::size_t>(partials) * config_.dim);
    backend_.for_each(Ub + 1, detail::PlanSumStage{b.seg_start.data(), count, stage, b.sum_plan.data()});
    backend_.exclusive_scan(b.sum_plan.data(), base.data(), Ub + 1);
    const detail::SumStage sum{stage,
                               Ub,
                               base.data(),
                               stage > 1 ? b.sum_base[prev].data() : nullptr,
                               b.seg_start.data(),
                               b.occ_at.data(),
                               b.has_coef ? b.occ_cf.data() : nullptr,
                               grad_output,
                               config_.dim,
                               stage > 1 ? b.sum_part[prev].data() : nullptr,
                               part.data(),
                               b.grad.data(),
                               record_.data(),
                               b.flags.data() + detail::kFlagOk,
                               check_sums,
                               false,
                               count};
    if (stage == 1) {  // every row's first group, item u = row u (no search)
      detail::SumStage first = sum;
      first.first_groups = true;
      backend_.for_each_lanes(Ub, first);
      if (b.n <= detail::kSumGroup) break;  // no row has a second group
    }
    backend_.for_each_lanes(items, sum);
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::flush() {
  const index_t slots = cache_slots();
  if (slots == 0) return;
  admit_pending();  // its fills are flushed with the rest, as after its forward()
  detail::Counters* counters = counters_.data();
  const detail::StateRef state = state_ref();
  backend_.for_each(
      slots, detail::FlushSlots<Storage, Rounding, Paths>{cache_ref(), store_.data(), stride_, row_stream(),
                                                          step_ptr(), flush_outcome_.data(), state});
  backend_.reduce_to(slots, detail::CountOutcome{flush_outcome_.data(), nullptr, nullptr}, &counters->tally);
  const auto row_bytes =
      static_cast<std::uint64_t>(Storage::data_bytes(config_.dim)) +
      (state.active() ? static_cast<std::uint64_t>(state.S) * StatePrecision::value_bytes : 0);
  backend_.for_each(1, detail::FoldCounts{counters, detail::Fold::Flush, 0, nullptr, row_bytes, nullptr});
}

}  // namespace mpe
