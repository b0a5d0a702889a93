// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/lookup.inl
/// @brief CachedEmbedding: prefetch / populate (sort, unique rows, admission) and forward /
/// forward_inference (included by mpe/embedding/cached_embedding.hpp).
#pragma once

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "mpe/detail/host/phase_mark.hpp"
#include "mpe/detail/kernels/all.hpp"

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::prepare_flags(Batch& b, index_t n,
                                                                                       index_t B) {
  b.n = n;
  b.B = B;
  b.dedup = detail::BatchDedup::none;
  b.stage = detail::BatchStage::checked;
  b.global_rows.reserve_discard(static_cast<std::size_t>(n));
  b.bag_of.reserve_discard(static_cast<std::size_t>(n));
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
index_t CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::unique_bound(
    const Batch& b) const {
  // An asynchronous backend launches min(n, rows) items (U is at most both) and each item
  // checks U itself; a synchronous one reads U for free.
  if constexpr (Backend::asynchronous) {
    return std::min(b.n, total_rows_);
  } else {
    return read_scalar(b.flags.data() + detail::kFlagU);
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::sort_unique(Batch& b,
                                                                                     bool bitmap_ok) {
  const index_t n = b.n;
  const auto sz = static_cast<std::size_t>(n);
  b.sorted_keys.reserve_discard(sz);  // the forward's per-occurrence slots use it too
  b.uniq.reserve_discard(sz);
  b.seg_start.reserve_discard(sz + 1);
  b.occ_to_unique.reserve_discard(sz);
  b.dedup = detail::BatchDedup::none;  // set once every buffer is in place (an allocation may throw)
  index_t* count = b.flags.data() + detail::kFlagU;
  if (n == 0) {
    backend_.for_each(1, detail::SetIndex{count, 0});
    backend_.for_each(1, detail::SetIndex{b.seg_start.data(), 0});
    b.dedup = detail::BatchDedup::sort;
    return;
  }
  if constexpr (host_paths) {
    const auto W = static_cast<index_t>((static_cast<std::uint64_t>(total_rows_) + 63) / 64);
    if (bitmap_ok && sequential_host() && W <= detail::kBitmapWordsPerOccurrence * n) {
      const auto words = static_cast<std::size_t>(W);
      if (b.row_bits.size() < words) {
        b.row_bits.reserve_discard(words);
        backend_.fill_bytes(b.row_bits.data(), 0, b.row_bits.bytes());
      }
      b.rank.reserve_discard(words);
      backend_.for_each(1, detail::BitmapUnique<Paths>{
                               b.global_rows.data(), n, b.flags.data() + detail::kFlagOk, b.row_bits.data(),
                               b.rank.data(), W, count, b.uniq.data(), b.occ_to_unique.data()});
      b.dedup = detail::BatchDedup::bitmap;
      return;
    }
  }
  b.sorted_pos.reserve_discard(sz);
  b.heads.reserve_discard(sz);
  b.rank.reserve_discard(sz);
  b.dedup = detail::BatchDedup::sort;
  backend_.for_each(n, detail::PrepareSort{b.global_rows.data(), b.sorted_keys.data(), b.sorted_pos.data(),
                                           b.flags.data() + detail::kFlagOk});
  // Keys are global rows (0 where the batch failed): below total_rows_.
  backend_.stable_sort_by_key(
      b.sorted_keys.data(), b.sorted_pos.data(), n,
      std::max(1, static_cast<int>(std::bit_width(static_cast<std::uint64_t>(total_rows_ - 1)))));
  backend_.for_each(n, detail::MarkHeads{b.sorted_keys.data(), b.heads.data()});
  backend_.exclusive_scan(b.heads.data(), b.rank.data(), n);
  backend_.for_each(1, detail::CountUnique{b.heads.data(), b.rank.data(), n, count, b.seg_start.data()});
  backend_.for_each(
      n, detail::ScatterUnique{b.sorted_keys.data(), b.sorted_pos.data(), b.heads.data(), b.rank.data(),
                               b.uniq.data(), b.seg_start.data(), b.occ_to_unique.data()});
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::populate(Batch& b,
                                                                                  const Batch* awaiting,
                                                                                  bool bitmap_ok) {
  const index_t* gate = b.flags.data() + detail::kFlagOk;
  detail::Counters* counters = counters_.data();
  const detail::StateRef state = state_ref();
  // Fills and write-backs move a compact state with its row: counted with the row's bytes.
  const auto row_bytes =
      static_cast<std::uint64_t>(Storage::data_bytes(config_.dim)) +
      (state.active() ? static_cast<std::uint64_t>(state.S) * StatePrecision::value_bytes : 0);
  if (num_sets_ == 0) {
    backend_.for_each(1, detail::FoldCounts{counters, detail::Fold::Populate, b.n, nullptr, row_bytes, gate});
    return;
  }
  sort_unique(b, bitmap_ok);
  MPE_PHASE_MARK("dedup");
  const index_t* count = b.flags.data() + detail::kFlagU;
  const index_t U = unique_bound(b);
  backend_.for_each(1, detail::SetLockFloor{counters, awaiting ? awaiting->flags.data() : nullptr,
                                            awaiting ? awaiting->id : 0, b.id});
  const auto sz = static_cast<std::size_t>(U);
  b.keys.reserve_discard(sz);
  b.order.reserve_discard(sz);
  b.admit_rows.reserve_discard(sz);
  b.slot_of_unique.reserve_discard(sz);
  b.outcome.reserve_discard(sz);
  const auto view = Cache::view(meta_.data(), cache_slots());
  b.estimates.reserve_discard(sz);
  if constexpr (Cache::observes) {
    for (int pass = 0; pass < 2; ++pass) {
      backend_.for_each(
          U, detail::ObserveRows<Cache>{b.uniq.data(), view, b.estimates.data(), pass, count, gate});
    }
  }
  backend_.for_each(U, detail::AdmissionKeys<Cache>{b.uniq.data(), view, num_sets_, b.estimates.data(),
                                                    b.keys.data(), b.order.data(), count});
  // Keys are set << 32 | ~priority; an asynchronous backend's items past U carry ~0, whose
  // low 32 + bit_width(num_sets) bits (a set field of all ones, above every set) still sort
  // them after every real item, so no more bits are sorted.
  backend_.stable_sort_by_key(
      b.keys.data(), b.order.data(), U,
      Backend::asynchronous
          ? 32 + static_cast<int>(std::bit_width(static_cast<std::uint64_t>(num_sets_)))
          : 32 + static_cast<int>(std::bit_width(static_cast<std::uint64_t>(num_sets_ - 1))));
  backend_.for_each(U, detail::AdmitRows{b.uniq.data(), b.order.data(), count, b.admit_rows.data()});
  MPE_PHASE_MARK("sort");
  detail::AdmitSet<Storage, Rounding, Cache, Paths> admit{b.keys.data(),
                                                          b.order.data(),
                                                          count,
                                                          gate,
                                                          b.admit_rows.data(),
                                                          b.estimates.data(),
                                                          cache_ref(),
                                                          view,
                                                          store_.data(),
                                                          stride_,
                                                          b.id,
                                                          &counters->lock_floor,
                                                          row_stream(),
                                                          step_ptr(),
                                                          b.slot_of_unique.data(),
                                                          b.outcome.data(),
                                                          state,
                                                          detail::AdmitPhase::Hits};
  bool fused = false;
  if constexpr (host_paths && detail::set_local_policy<Cache>) {
    // One host thread: one pass, each set's hits a few sets before its misses.
    if (sequential_host()) {
      MPE_PHASE_MARK("hits");  // empty: the hits run inside the one pass
      // One thread: the pass fences its non-temporal fills itself. Only where the backend's
      // paths stream the fills (HostPaths: the SIMD decode, every cache row 32-byte aligned)
      // does it; elsewhere the victims' rows keep their prefetch for writing.
      admit.stream_fills = Paths::template stream_fills<Storage>(config_.dim);
      backend_.for_each(1, detail::AdmitFused<Storage, Rounding, Cache, Paths>{admit});
      fused = true;
    }
  }
  if constexpr (!host_paths && detail::hits_commute<Cache>) {
    // Laned backends (a GPU): every item's lookup in parallel, lanes across the ways; then
    // each set's misses are decided (slots and metadata only: a warp per set where the
    // policy's misses take SetVictims' order and a set fits a warp, else a thread); then the dirty
    // victims' write-backs and the fills, a warp per row. The same slots and bits as the
    // one-thread-per-set phases below (a victim is never a row of this batch, so no fill
    // reads a row that a write-back writes).
    b.evicted.reserve_discard(sz);
    backend_.fill_bytes(b.slot_of_unique.data(), 0xff, sz * sizeof(index_t));  // -1
    backend_.fill_bytes(b.outcome.data(), 0, sz);
    backend_.for_each_lanes(
        U, detail::AdmitHitsLanes<Cache>{b.keys.data(), b.order.data(), b.admit_rows.data(), count, gate,
                                         cache_ref(), view, b.id, b.slot_of_unique.data(), b.outcome.data()});
    MPE_PHASE_MARK("hits");
    admit.phase = detail::AdmitPhase::Misses;
    admit.evicted = b.evicted.data();
    if constexpr (warp_lanes<Backend> && detail::uses_scored_choose<Cache> && Cache::ways <= 32) {
      // A warp per set (its ways over the lanes) instead of a thread: the same decisions.
      backend_.for_each_lanes((U + Backend::lane_width - 1) / Backend::lane_width,
                              detail::AdmitMissesLanes<Storage, Rounding, Cache, Paths>{admit});
    } else {
      backend_.for_each(U, admit);
    }
    backend_.for_each_lanes(U, detail::WriteBackLanes<Storage, Rounding>{
                                   b.slot_of_unique.data(), b.evicted.data(), b.outcome.data(), cache_ref(),
                                   store_.data(), stride_, row_stream(), step_ptr(), state, count, gate});
    backend_.for_each_lanes(
        U, detail::FillLanes<Storage>{b.uniq.data(), b.slot_of_unique.data(), b.outcome.data(), cache_ref(),
                                      store_.data(), stride_, state, count, gate});
    fused = true;
  }
  if (!fused) {
    backend_.for_each(U, admit);  // every set's hits, then every set's misses
    MPE_PHASE_MARK("hits");
    admit.phase = detail::AdmitPhase::Misses;
    backend_.for_each(U, admit);
  }
  MPE_PHASE_MARK("misses");
  backend_.reduce_to(U, detail::CountOutcome{b.outcome.data(), count, gate}, &counters->tally);
  backend_.for_each(1, detail::FoldCounts{counters, detail::Fold::Populate, b.n, count, row_bytes, gate});
  if (const std::uint64_t period = Cache::decay_period(cache_slots()); period > 0) {
    backend_.for_each(1, detail::DecayTick{counters, count, period, gate});
    bool due = true;
    if constexpr (!Backend::asynchronous) {
      std::uint64_t h = 0;
      backend_.copy_to_host(&h, &counters->decays_due, sizeof h);
      due = h > 0;
    }
    if (due) {
      backend_.for_each(static_cast<index_t>(Cache::decay_items(cache_slots())),
                        detail::Decay<Cache>{view, &counters->decays_due});
    }
  }
  MPE_PHASE_MARK("count");
}

// The batch keeps the number its forward() gave it, and no populate has run between that
// forward() and this one (every call that would populate or write rows comes here first), so
// the admission is the one that forward() would have made. The dedup takes the bitmap only
// where the forward chose the scatter backward (offsets kept), as forward()'s populate does.
template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::admit_pending() {
  Batch& c = current_;
  if (!c.admission_owed()) return;
  c.stage = detail::BatchStage::awaiting_backward;
  populate(c, nullptr, c.scatter);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::prefetch(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets) {
  const char* fn = "prefetch";
  ++call_seq_;
  const index_t B = check_shapes(fn, indices, offsets, {}, Pooling::Sum, kSkipOutputCheck);
  const auto n = static_cast<index_t>(indices.size());
  detail::CallRecord* rec = record_.data();
  prepare_flags(staging_, n, B);
  backend_.for_each(1, detail::ResetRecord{rec});
  queue_checks(rec, indices, offsets, {}, B, staging_.global_rows.data(), staging_.bag_of.data());
  backend_.for_each(1, detail::SealForward{rec, offsets.data(), static_cast<index_t>(offsets.size()) - 1, n,
                                           B, indices.data(), nullptr, false, staging_.flags.data(), true,
                                           deferred() ? deferred_.data() : nullptr, detail::kCallPrefetch,
                                           static_cast<index_t>(call_seq_)});
  if (!deferred()) throw_if_failed(fn, read_record(rec), false, &staging_);
  staging_.indices_copy.reserve_discard(indices.size());
  staging_.offsets_copy.reserve_discard(offsets.size());
  backend_.copy(staging_.indices_copy.data(), indices.data(), indices.size_bytes());
  backend_.copy(staging_.offsets_copy.data(), offsets.data(), offsets.size_bytes());
  admit_pending();  // the batch awaiting backward first, as its forward() would have
  staging_.id = ++populate_counter_;
  // Rows of the batch awaiting backward stay locked too.
  populate(staging_, current_.awaiting_backward() ? &current_ : nullptr);
  staging_.stage = detail::BatchStage::prefetched;
  pending_.stage = detail::BatchStage::empty;
  std::swap(pending_, staging_);
}

// load(): rebuilds the pending prefetch's batch (host spans, verified by load) as the
// prefetch left it, without a populate: its cache fills, hits and counters are already in
// the loaded state. Its slot assignment is looked up (LookupSlots explains why that equals
// what the populate decided).
template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::restore_pending(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets) {
  Batch& p = pending_;
  const auto n = static_cast<index_t>(indices.size());
  const index_t B = static_cast<index_t>(offsets.size() - 1) / num_tables();
  p.indices_copy.reserve_discard(indices.size());
  p.offsets_copy.reserve_discard(offsets.size());
  backend_.copy_from_host(p.indices_copy.data(), indices.data(), indices.size_bytes());
  backend_.copy_from_host(p.offsets_copy.data(), offsets.data(), offsets.size_bytes());
  const std::span<const std::int64_t> idx(p.indices_copy.data(), indices.size());
  const std::span<const std::int64_t> off(p.offsets_copy.data(), offsets.size());
  prepare_flags(p, n, B);
  detail::CallRecord* rec = record_.data();
  backend_.for_each(1, detail::ResetRecord{rec});
  queue_checks(rec, idx, off, {}, B, p.global_rows.data(), p.bag_of.data());
  backend_.for_each(
      1, detail::SealForward{rec, off.data(), static_cast<index_t>(off.size()) - 1, n, B, idx.data(), nullptr,
                             false, p.flags.data(), true, nullptr, detail::kCallPrefetch, 0});
  p.id = populate_counter_;  // no populate has run since the prefetch's
  if (num_sets_ > 0) {
    sort_unique(p);
    const index_t U = unique_bound(p);
    p.slot_of_unique.reserve_discard(static_cast<std::size_t>(U));
    backend_.for_each(U, detail::LookupSlots{p.uniq.data(), cache_ref(), p.slot_of_unique.data(),
                                             p.flags.data() + detail::kFlagU});
  }
  p.stage = detail::BatchStage::prefetched;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::forward(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<float> output,
    Pooling pooling, std::span<const float> per_sample_weights) {
  const char* fn = "forward";
  MPE_PHASE_MARK("begin");
  ++call_seq_;
  const index_t B = check_shapes(fn, indices, offsets, per_sample_weights, pooling, output.size());
  const auto n = static_cast<index_t>(indices.size());
  const auto m = static_cast<index_t>(offsets.size());
  const index_t bags = m - 1;
  detail::CallRecord* rec = record_.data();
  const float* w = per_sample_weights.empty() ? nullptr : per_sample_weights.data();
  backend_.for_each(1, detail::ResetRecord{rec});
  // Is this the pending prefetch's batch? Synchronous: the comparison is part of the one
  // read, and a different batch is simply not the prefetched one. Deferred: the host cannot
  // know without waiting, so a batch of the prefetched sizes is taken to be the prefetched
  // one, and different contents are a recorded error.
  const bool sizes_equal = pending_.prefetched() && pending_.n == n && pending_.B == B;
  index_t* mismatch = deferred() ? &rec->pos[detail::kMismatch] : &rec->differs;
  if (sizes_equal) {
    backend_.for_each(n + m, detail::CompareBatch{indices.data(), pending_.indices_copy.data(), n,
                                                  offsets.data(), pending_.offsets_copy.data(), mismatch});
  }
  Batch* target = &staging_;
  if (deferred() && sizes_equal) {
    // The prefetch validated these offsets and indices; a mismatch is caught above.
    target = &pending_;
    if (w) backend_.for_each(n, detail::CheckFinite{w, &rec->pos[detail::kWeights]});
  } else {
    prepare_flags(staging_, n, B);
    queue_checks(rec, indices, offsets, per_sample_weights, B, staging_.global_rows.data(),
                 staging_.bag_of.data());
  }
  backend_.for_each(1, detail::SealForward{rec, offsets.data(), bags, n, B, indices.data(), w,
                                           skip_non_finite(), target->flags.data(), target == &staging_,
                                           deferred() ? deferred_.data() : nullptr, detail::kCallForward,
                                           static_cast<index_t>(call_seq_)});
  bool use_pending = deferred() && sizes_equal;
  if (!deferred()) {
    const detail::CallRecord r = read_record(rec);  // the one wait of this call
    throw_if_failed(fn, r, skip_non_finite(), &staging_);
    use_pending = sizes_equal && r.differs == detail::kNoError;
    if (use_pending && r.pos[detail::kWeights] != detail::kNoError) {  // NonFinite::Skip
      backend_.for_each(1, detail::SetIndex{pending_.flags.data() + detail::kFlagSkip, 1});
    }
  }
  Batch* b = &pending_;
  // defer_admission: the batch this forward replaces is admitted first, as its forward()
  // would have (nothing to do when a prefetch() used here already did it).
  admit_pending();
  MPE_PHASE_MARK("validate");
  // EmbeddingConfig::defer_admission: the batch is admitted by admit_pending() (backward),
  // so its occurrences' slots are looked up in the cache as it stands (no row of it moves
  // before its pooling).
  const bool defer = !use_pending && defers_admission();
  if (!use_pending) {
    staging_.id = ++populate_counter_;
    if (!defer) populate(staging_, nullptr);
    pending_.stage = detail::BatchStage::empty;  // the prefetched batch, not used
    b = &staging_;
  }
  std::swap(current_, *b);
  b->stage = detail::BatchStage::empty;  // the batch this forward replaces
  Batch& cur = current_;
  const index_t T = num_tables();
  const bool mean = pooling == Pooling::Mean;
  const index_t* gate = cur.flags.data() + detail::kFlagOk;
  // Each occurrence's slot, into sorted_keys (only sort_unique uses it). A batch populated
  // by an earlier prefetch() has its slots checked against their tags (set_weights may have
  // dropped a line since); one populated by this call has nothing to check.
  index_t* slot_of_occ = nullptr;
  bool probe_in_pool = false;
  if (defer) {
    // As forward_inference (sorted_keys is free until admit_pending's dedup).
    cur.sorted_keys.reserve_discard(static_cast<std::size_t>(cur.n));
    slot_of_occ = cur.sorted_keys.data();
    probe_in_pool = probe_slots(cur.global_rows.data(), cur.n, slot_of_occ, gate);
  } else if (num_sets_ > 0) {
    slot_of_occ = cur.sorted_keys.data();
    backend_.for_each(cur.n, detail::OccurrenceSlots{cur.global_rows.data(), cur.occ_to_unique.data(),
                                                     cur.slot_of_unique.data(), cache_ref(), use_pending,
                                                     slot_of_occ, gate});
  }
  MPE_PHASE_MARK("slots");
  backend_.for_each_lanes(
      bags, detail::PoolBags<Storage, detail::kPoolLaneGroup, Paths>{
                offsets.data(), cur.global_rows.data(), slot_of_occ, w, cache_ref(), store_.data(), stride_,
                cur.B, T, config_.dim, mean, output.data(), gate, probe_in_pool ? slot_of_occ : nullptr});
  MPE_PHASE_MARK("pool");
  // Backward needs per-occurrence coefficients only for weighted or mean pooling.
  cur.has_coef = w != nullptr || mean;
  if (cur.has_coef) {
    cur.coef.reserve_discard(static_cast<std::size_t>(cur.n));
    backend_.for_each(
        cur.n, detail::Coefficients{offsets.data(), cur.bag_of.data(), w, mean, cur.coef.data(), gate});
  }
  // Decided once here (OpenMP's default may change before backward): the backward's path.
  // A batch deduplicated without sorted_pos (BitmapUnique) has only this one.
  // A deferred admission dedups with the bitmap only where this chose the scatter.
  cur.scatter = scatter_backward() || cur.dedup == detail::BatchDedup::bitmap;
  if (cur.scatter) {
    cur.offsets_copy.reserve_discard(offsets.size());
    backend_.copy(cur.offsets_copy.data(), offsets.data(), offsets.size_bytes());
  }
  cur.stage = defer ? detail::BatchStage::awaiting_admission : detail::BatchStage::awaiting_backward;
  MPE_PHASE_MARK("end");
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
bool CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::probe_slots(
    const index_t* global_rows, index_t n, index_t* slots, const index_t* gate) const {
  if (Backend::lane_width == 1 && has_slot_index() && Paths::template pools_ranges<Storage>()) {
    return true;  // the pooling pass reads the slot index itself
  }
  if (n == 0) return false;
  // -1 first where lanes split a set's ways (only the finding lane writes); one lane, or
  // lane 0 reading the slot index, writes every slot itself.
  if constexpr (Backend::lane_width > 1)
    if (!has_slot_index()) backend_.fill_bytes(slots, 0xff, static_cast<std::size_t>(n) * sizeof(index_t));
  backend_.for_each_lanes(n, detail::ProbeSlots<Paths>{global_rows, cache_ref(), slots, gate});
  return false;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::forward_inference(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<float> output,
    Pooling pooling, std::span<const float> per_sample_weights) const {
  const char* fn = "forward_inference";
  const index_t B = check_shapes(fn, indices, offsets, per_sample_weights, pooling, output.size());
  const auto n = static_cast<index_t>(indices.size());
  const index_t bags = static_cast<index_t>(offsets.size()) - 1;
  // Own buffers, so concurrent const calls never share workspace. Always synchronous.
  IBuf global_rows(backend_, indices.size()), bag_of(backend_, indices.size());
  detail::Buffer<detail::CallRecord, Backend> record(backend_, 1);
  const float* w = per_sample_weights.empty() ? nullptr : per_sample_weights.data();
  backend_.for_each(1, detail::ResetRecord{record.data()});
  queue_checks(record.data(), indices, offsets, per_sample_weights, B, global_rows.data(), bag_of.data());
  backend_.for_each(1, detail::SealForward{record.data(), offsets.data(), bags, n, B, indices.data(), w,
                                           false, nullptr, true, nullptr, detail::kCallForward, 0});
  throw_if_failed(fn, read_record(record.data()), false, nullptr);
  // Each occurrence's slot first (one pass over the sets, prefetched ahead), then pooling
  // from the slots as forward's does: the rows ahead prefetched from where they are. With a
  // slot index on the host's SIMD pooling the pooling pass reads the slots itself
  // (PoolBags::probe_out), a little ahead of the rows it pools, instead of a pass before it.
  IBuf slots(backend_, num_sets_ > 0 ? indices.size() : 0);
  const bool probe_in_pool = num_sets_ > 0 && probe_slots(global_rows.data(), n, slots.data(), nullptr);
  backend_.for_each_lanes(
      bags, detail::PoolBags<Storage, detail::kPoolLaneGroup, Paths>{
                offsets.data(), global_rows.data(), num_sets_ > 0 ? slots.data() : nullptr, w, cache_ref(),
                store_.data(), stride_, B, num_tables(), config_.dim, pooling == Pooling::Mean, output.data(),
                nullptr, num_sets_ > 0 && probe_in_pool ? slots.data() : nullptr});
}

}  // namespace mpe
