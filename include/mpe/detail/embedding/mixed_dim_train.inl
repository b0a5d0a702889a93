// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/mixed_dim_train.inl
/// @brief MixedDimEmbedding: prefetch / forward / forward_inference / backward over the D-groups
/// (included by mpe/embedding/mixed_dim_embedding.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "mpe/detail/embedding/mixed_dim.hpp"

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::prefetch(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets) {
  if (groups_.size() == 1) {  // one group: it checks the batch itself, nothing to split
    groups_[0].prefetch(indices, offsets);
    return;
  }
  const std::int64_t B = check_batch("prefetch", indices, offsets, {}, false, scratch_);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    batch_type& b = batches_[g];
    split(g, indices, offsets, {}, B, scratch_, b);
    groups_[g].prefetch(b.idx(), b.offs());
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::forward(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<float> output,
    Pooling pooling, std::span<const float> per_sample_weights) {
  const std::int64_t B = check("forward", indices, offsets, output.size(), pooling, per_sample_weights,
                               /*training=*/true, scratch_);
  const bool was_pending = pending_;
  pending_ = false;
  bool any_done = false;  // a group's forward has returned
  try {
    each_group(indices, offsets, output, per_sample_weights, B, scratch_, batches_.data(), 1,
               [&](std::size_t g, auto i, auto o, auto out, auto w) {
                 groups_[g].forward(i, o, out, pooling, w);
                 any_done = true;
               });
  } catch (const std::invalid_argument&) {
    // Bad input refused by the first group's own checks (one group: check() leaves the
    // indices to it) changed nothing there: the earlier forward still awaits backward.
    if (!any_done) pending_ = was_pending;
    throw;
  }
  pending_B_ = B;
  pending_ = true;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::forward_inference(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<float> output,
    Pooling pooling, std::span<const float> per_sample_weights) const {
  scratch_type s = new_scratch();  // per call, as the split buffer: concurrent const calls share nothing
  const std::int64_t B = check("forward_inference", indices, offsets, output.size(), pooling,
                               per_sample_weights, /*training=*/false, s);
  batch_type b = new_batch();
  each_group(indices, offsets, output, per_sample_weights, B, s, &b, 0,
             [&](std::size_t g, auto i, auto o, auto out, auto w) {
               groups_[g].forward_inference(i, o, out, pooling, w);
             });
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
template <Optimizer Opt>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::backward(
    std::span<const float> grad_output, const Opt& optimizer) {
  const char* fn = "backward";
  if (!pending_) throw std::logic_error(detail::md_prefix(fn) + "no forward() is awaiting backward()");
  const std::int64_t B = pending_B_;
  const auto expect = static_cast<std::size_t>(B * layout_.total_dim);
  if (grad_output.size() != expect) {
    invalid(fn, "grad_output.size() = " + std::to_string(grad_output.size()) +
                    "; expected B*sum(D) = " + std::to_string(B) + "*" + std::to_string(layout_.total_dim) +
                    " = " + std::to_string(expect));
  }
  // The caller's position (each group would name its own).
  if (groups_.size() > 1 && config_.non_finite == NonFinite::Throw) check_grad_finite(grad_output);
  bool apply = true, apply0 = true;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    std::span<const float> go = grad_output;
    if (groups_.size() > 1) {
      batch_type& b = batches_[g];
      gather(g, grad_output, B, b);
      go = b.buf();
    }
    try {
      const bool a = groups_[g].prepare_backward(go, optimizer);
      if (g == 0) apply0 = a;
      apply = apply && a;
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(detail::md_prefix(fn) + "group " + std::to_string(g) + " (D = " +
                                  std::to_string(layout_.group_dim[g]) + ", tables " + tables_of(g) +
                                  "): " + detail::caller_numbering(e.what(), layout_.group_tables[g]));
    } catch (const std::logic_error& e) {  // e.g. a changed optimizer (the same in every group)
      throw std::logic_error(detail::md_prefix(fn) +
                             detail::caller_numbering(e.what(), layout_.group_tables[g]));
    }
  }
  if (apply) {
    for (auto& e : groups_) e.apply_prepared_backward(optimizer);
  } else if (apply0) {
    // Skipped because of another group's input: count it in group 0's counters, which
    // stats() reports (a group counts only a skip of its own input).
    groups_[0].count_skipped_step();
  }
  for (auto& e : groups_) e.finish_backward();
  pending_ = false;
}

}  // namespace mpe
