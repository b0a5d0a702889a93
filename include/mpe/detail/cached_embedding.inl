// SPDX-License-Identifier: Apache-2.0
// Implementation of mpe::CachedEmbedding (included by cached_embedding.hpp).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>

#include "mpe/detail/kernels.hpp"

namespace mpe {

#define MPE_CE_TEMPLATE                                                                       \
  template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend, \
            StatePrecisionPolicy StatePrecision>
#define MPE_CE CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>

namespace detail {
inline std::string ce_prefix(const char* fn) { return std::string("mpe::CachedEmbedding::") + fn + ": "; }
[[noreturn]] inline void invalid(const char* fn, const std::string& what) {
  throw std::invalid_argument(ce_prefix(fn) + what);
}
}  // namespace detail

MPE_CE_TEMPLATE
void MPE_CE::Batch::set_backend(const Backend& b) {
  for (IBuf* p : {&flags, &global_rows, &bag_of, &sorted_keys, &sorted_pos, &heads, &rank, &uniq, &seg_start,
                  &occ_to_unique, &slot_of_unique, &order, &indices_copy, &offsets_copy}) {
    p->set_backend(b);
  }
  keys.set_backend(b);
  estimates.set_backend(b);
  outcome.set_backend(b);
  coef.set_backend(b);
  grad.set_backend(b);
  update.set_backend(b);
}

MPE_CE_TEMPLATE
std::size_t MPE_CE::Batch::bytes() const {
  std::size_t s = 0;
  for (const IBuf* p : {&flags, &global_rows, &bag_of, &sorted_keys, &sorted_pos, &heads, &rank, &uniq,
                        &seg_start, &occ_to_unique, &slot_of_unique, &order, &indices_copy, &offsets_copy}) {
    s += p->bytes();
  }
  return s + keys.bytes() + estimates.bytes() + outcome.bytes() + coef.bytes() + grad.bytes() +
         update.bytes();
}

MPE_CE_TEMPLATE
MPE_CE::CachedEmbedding(const EmbeddingConfig& config, Backend backend)
    : config_(config), backend_(std::move(backend)) {
  const char* fn = "CachedEmbedding";
  if (config.table_rows.empty()) detail::invalid(fn, "config.table_rows is empty; need T >= 1 tables");
  if (config.dim < 1) detail::invalid(fn, "config.dim = " + std::to_string(config.dim) + "; must be >= 1");
  if (config.cache_rows < 0) {
    detail::invalid(fn, "config.cache_rows = " + std::to_string(config.cache_rows) + "; must be >= 0");
  }
  if (config.cache_rows > 0 && config.cache_rows < Cache::ways) {
    detail::invalid(fn, "config.cache_rows = " + std::to_string(config.cache_rows) + " is below the " +
                            std::to_string(Cache::ways) +
                            " ways of one set; use 0 (no cache) or >= " + std::to_string(Cache::ways));
  }
  const auto a = config.row_alignment;
  if (a < 1 || a > 4096 || (a & (a - 1)) != 0) {
    detail::invalid(fn,
                    "config.row_alignment = " + std::to_string(a) + "; must be a power of two in [1, 4096]");
  }
  if (config.non_finite != NonFinite::Throw && config.non_finite != NonFinite::Skip) {
    detail::invalid(fn, "config.non_finite = " + std::to_string(static_cast<int>(config.non_finite)) +
                            " is not a NonFinite value (Throw = 0, Skip = 1)");
  }
  if (config.validation != Validation::Synchronous && config.validation != Validation::Deferred) {
    detail::invalid(fn, "config.validation = " + std::to_string(static_cast<int>(config.validation)) +
                            " is not a Validation value");
  }
  table_offsets_host_.assign(1, 0);
  for (std::size_t t = 0; t < config.table_rows.size(); ++t) {
    const auto r = config.table_rows[t];
    if (r < 1) {
      detail::invalid(
          fn, "config.table_rows[" + std::to_string(t) + "] = " + std::to_string(r) + "; must be >= 1");
    }
    if (r > INT64_MAX / 2 - table_offsets_host_.back()) detail::invalid(fn, "total rows overflow int64");
    table_offsets_host_.push_back(table_offsets_host_.back() + r);
  }
  total_rows_ = table_offsets_host_.back();
  stride_ = row_bytes<Storage>(config.dim, a);
  if (static_cast<unsigned long long>(total_rows_) > SIZE_MAX / stride_)
    detail::invalid(fn, "store size overflows size_t");

  for (auto* b : {&current_, &pending_, &staging_}) {
    b->set_backend(backend_);
    b->flags.reset(detail::kNumFlags);
  }
  table_offsets_.set_backend(backend_);
  store_.set_backend(backend_);
  cache_rows_.set_backend(backend_);
  tags_.set_backend(backend_);
  last_use_.set_backend(backend_);
  dirty_.set_backend(backend_);
  meta_.set_backend(backend_);
  opt_state_.set_backend(backend_);
  cache_state_.set_backend(backend_);
  error_.set_backend(backend_);
  flush_outcome_.set_backend(backend_);
  counters_.set_backend(backend_);
  record_.set_backend(backend_);
  deferred_.set_backend(backend_);
  // Placement hints for the backend (CudaBackend may put the store in managed or
  // host-mapped memory) and users' memory pools.
  table_offsets_.set_purpose(MemoryPurpose::Metadata);
  counters_.set_purpose(MemoryPurpose::Metadata);
  store_.set_purpose(MemoryPurpose::Store);
  cache_rows_.set_purpose(MemoryPurpose::Cache);
  tags_.set_purpose(MemoryPurpose::Cache);
  last_use_.set_purpose(MemoryPurpose::Cache);
  dirty_.set_purpose(MemoryPurpose::Cache);
  meta_.set_purpose(MemoryPurpose::Cache);
  opt_state_.set_purpose(MemoryPurpose::Optimizer);
  cache_state_.set_purpose(MemoryPurpose::Optimizer);

  table_offsets_.reset(table_offsets_host_.size());
  backend_.copy_from_host(table_offsets_.data(), table_offsets_host_.data(), table_offsets_.bytes());
  store_.reset(static_cast<std::size_t>(total_rows_) * stride_);
  // All-zero bytes decode to 0.0 in every format (Int8/Int4: scale 0, bias 0).
  backend_.fill_bytes(store_.data(), 0, store_.bytes());
  error_.reset(1);
  counters_.reset(1);
  backend_.fill_bytes(counters_.data(), 0, counters_.bytes());
  record_.reset(1);
  deferred_.reset(1);
  backend_.fill_bytes(deferred_.data(), 0xff, deferred_.bytes());  // check = -1: none
  backend_.for_each(1, detail::SetIndex{&deferred_.data()->later, 0});

  if (config.cache_rows > 0) {
    const index_t W = Cache::ways;
    const index_t rounded_rows = (total_rows_ + W - 1) / W * W;
    const index_t C = std::min<index_t>(config.cache_rows, rounded_rows);
    num_sets_ = C / W;
    if (num_sets_ >= (index_t{1} << 32)) detail::invalid(fn, "config.cache_rows gives 2^32 or more sets");
    const std::size_t slots = static_cast<std::size_t>(num_sets_ * W);
    cache_rows_.reset(slots * static_cast<std::size_t>(config.dim));
    backend_.fill_bytes(cache_rows_.data(), 0, cache_rows_.bytes());
    tags_.reset(slots);
    backend_.fill_bytes(tags_.data(), 0xff, tags_.bytes());  // -1: empty
    last_use_.reset(slots);
    backend_.fill_bytes(last_use_.data(), 0, last_use_.bytes());
    dirty_.reset(slots);
    backend_.fill_bytes(dirty_.data(), 0, dirty_.bytes());
    flush_outcome_.reset(slots);
    meta_.reset(static_cast<std::size_t>(Cache::meta_words(static_cast<index_t>(slots))));
    backend_.fill_bytes(meta_.data(), 0, meta_.bytes());
  }
}

MPE_CE_TEMPLATE
CacheRef MPE_CE::cache_ref() const {
  CacheRef c;
  c.rows = const_cast<float*>(cache_rows_.data());
  c.tags = const_cast<index_t*>(tags_.data());
  c.last_use = const_cast<std::uint64_t*>(last_use_.data());
  c.dirty = const_cast<std::uint8_t*>(dirty_.data());
  c.num_sets = num_sets_;
  c.ways = Cache::ways;
  c.dim = config_.dim;
  return c;
}

MPE_CE_TEMPLATE
std::int64_t MPE_CE::state_floats() const {
  return opt_state_.size() / (static_cast<std::size_t>(total_rows_) * StatePrecision::value_bytes);
}

// The compact state view: inactive with StateFp32 (its FP32 array is addressed directly)
// and before the first applied step.
MPE_CE_TEMPLATE
detail::StateRef MPE_CE::state_ref() const {
  if constexpr (!StatePrecision::cached) {
    return {};
  } else {
    if (opt_state_.size() == 0) return {};
    return detail::StateRef{const_cast<std::uint8_t*>(opt_state_.data()),
                            num_sets_ > 0 ? const_cast<float*>(cache_state_.data()) : nullptr, state_floats(),
                            StatePrecision::format, config_.seed};
  }
}

MPE_CE_TEMPLATE
index_t MPE_CE::read_scalar(const index_t* p) const {
  index_t v;
  backend_.copy_to_host(&v, p, sizeof v);
  return v;
}

MPE_CE_TEMPLATE
detail::Counters MPE_CE::read_counters() const {
  detail::Counters c;
  backend_.copy_to_host(&c, counters_.data(), sizeof c);
  return c;
}

MPE_CE_TEMPLATE
void MPE_CE::reset_stats() { backend_.fill_bytes(&counters_.data()->stats, 0, sizeof(CacheStats)); }

MPE_CE_TEMPLATE
void MPE_CE::check_row_range(const char* fn, const char* arg, std::size_t size,
                             std::int64_t first_row) const {
  const auto D = static_cast<std::size_t>(config_.dim);
  if (size % D != 0) {
    detail::invalid(fn, std::string(arg) + ".size() = " + std::to_string(size) +
                            " is not a multiple of dim " + std::to_string(D));
  }
  const auto rows = static_cast<index_t>(size / D);
  if (first_row < 0 || first_row > total_rows_ || rows > total_rows_ - first_row) {
    detail::invalid(fn, "first_row = " + std::to_string(first_row) + " with " + std::to_string(rows) +
                            " rows leaves the table of " + std::to_string(total_rows_) + " rows");
  }
}

MPE_CE_TEMPLATE
void MPE_CE::check_output_size(const char* fn, std::size_t size, index_t B) const {
  const index_t T = num_tables();
  if (size != static_cast<std::size_t>(B * T * config_.dim)) {
    detail::invalid(fn, "output.size() = " + std::to_string(size) + "; expected B*T*D = " +
                            std::to_string(B) + "*" + std::to_string(T) + "*" + std::to_string(config_.dim));
  }
}

MPE_CE_TEMPLATE
index_t MPE_CE::check_shapes(const char* fn, std::span<const std::int64_t> indices,
                             std::span<const std::int64_t> offsets, std::span<const float> weights,
                             Pooling pooling, std::size_t output_size) const {
  const index_t T = num_tables();
  if (offsets.empty() || (offsets.size() - 1) % static_cast<std::size_t>(T) != 0) {
    detail::invalid(fn, "offsets.size() = " + std::to_string(offsets.size()) +
                            "; must be T*B + 1 with T = " + std::to_string(T));
  }
  if (pooling != Pooling::Sum && pooling != Pooling::Mean) {
    detail::invalid(fn, "pooling = " + std::to_string(static_cast<int>(pooling)) +
                            " is not a Pooling value (Sum = 0, Mean = 1)");
  }
  const index_t B = static_cast<index_t>(offsets.size() - 1) / T;
  if (output_size != kSkipOutputCheck) check_output_size(fn, output_size, B);
  if (!weights.empty()) {
    if (pooling != Pooling::Sum) detail::invalid(fn, "per_sample_weights are only allowed with Pooling::Sum");
    if (weights.size() != indices.size()) {
      detail::invalid(fn, "per_sample_weights.size() = " + std::to_string(weights.size()) +
                              "; must equal indices.size() = " + std::to_string(indices.size()));
    }
  }
  return B;
}

MPE_CE_TEMPLATE
void MPE_CE::queue_checks(detail::CallRecord* rec, std::span<const std::int64_t> indices,
                          std::span<const std::int64_t> offsets, std::span<const float> weights, index_t B,
                          index_t* global_rows, index_t* bag_of) const {
  const index_t bags = static_cast<index_t>(offsets.size()) - 1;
  const auto n = static_cast<index_t>(indices.size());
  backend_.for_each(bags + 1, detail::CheckOffsets{offsets.data(), bags, n, rec});
  if (!weights.empty()) {
    backend_.for_each(n, detail::CheckFinite{weights.data(), &rec->pos[detail::kWeights]});
  }
  backend_.for_each(bags, detail::ExpandBags{indices.data(), offsets.data(), table_offsets_.data(), B,
                                             global_rows, bag_of, rec});
}

MPE_CE_TEMPLATE
detail::CallRecord MPE_CE::read_record(const detail::CallRecord* rec) const {
  detail::CallRecord r;
  backend_.copy_to_host(&r, rec, sizeof r);
  return r;
}

MPE_CE_TEMPLATE
std::string MPE_CE::describe(int check, index_t pos, const index_t* v) const {
  using namespace detail;
  const auto s = [](index_t x) { return std::to_string(x); };
  const auto f = [](index_t bits) { return format_float(num::bits_float(static_cast<std::uint32_t>(bits))); };
  switch (check) {
    case kOffsetsFirst:
      return "offsets[0] = " + s(v[0]) + "; must be 0";
    case kOffsetsLast:
      return "offsets[" + s(pos) + "] = " + s(v[0]) + "; must equal indices.size() = " + s(v[1]);
    case kOffsetsOrder:
      return "offsets[" + s(pos + 1) + "] = " + s(v[1]) + " < offsets[" + s(pos) + "] = " + s(v[0]) +
             "; offsets must be non-decreasing";
    case kWeights:
      return "per_sample_weights[" + s(pos) + "] = " + f(v[0]) + " is not finite";
    case kIndex:
      return "indices[" + s(pos) + "] = " + s(v[0]) + " is outside table " + s(v[2]) + " (" +
             s(config_.table_rows[static_cast<std::size_t>(v[2])]) + " rows; bag " + s(v[1]) + ")";
    case kMismatch:
      return (pos < v[0] ? "indices[" + s(pos) + "] differs" : "offsets[" + s(pos - v[0]) + "] differs") +
             " from the pending prefetch()'s batch of the same sizes; under Validation::Deferred a "
             "forward() with the prefetched sizes must pass the prefetched batch";
    case kGrad:
      return "grad_output[" + s(pos) + "] = " + f(v[0]) + " is not finite";
    case kOverflow: {
      const auto& first = table_offsets_host_;
      const auto t =
          static_cast<index_t>(std::upper_bound(first.begin(), first.end(), v[0]) - first.begin()) - 1;
      return "row " + s(v[0]) + " (its gradient summed over " + s(v[1]) + " occurrence(s); table " + s(t) +
             ", local row " + s(v[0] - first[static_cast<std::size_t>(t)]) +
             ") overflows in this step: its summed gradient, new optimizer state or update is " + f(v[2]) +
             " although grad_output is finite; nothing was updated (scale the loss down, or use "
             "NonFinite::Skip to skip such steps)";
    }
    default:
      return "unknown check " + s(check);
  }
}

MPE_CE_TEMPLATE
void MPE_CE::throw_if_failed(const char* fn, const detail::CallRecord& r, bool skip_non_finite,
                             Batch* drop) const {
  const int c = detail::first_failure(r, skip_non_finite);
  if (c < 0) return;
  if (drop) drop->valid = false;  // the batch this call was preparing
  detail::invalid(fn, describe(c, r.pos[c], r.v[c]));
}

MPE_CE_TEMPLATE
void MPE_CE::throw_deferred() {
  detail::DeferredError d;
  backend_.copy_to_host(&d, deferred_.data(), sizeof d);
  if (d.check < 0) return;
  backend_.fill_bytes(deferred_.data(), 0xff, sizeof d);
  backend_.for_each(1, detail::SetIndex{&deferred_.data()->later, 0});
  std::string what = std::string("mpe::CachedEmbedding::") + detail::call_name(d.call) + " (deferred, call " +
                     std::to_string(d.seq) + "): " + describe(static_cast<int>(d.check), d.pos, d.v);
  if (d.later > 0) {
    what += "; " + std::to_string(d.later) + " later call" + (d.later > 1 ? "s" : "") +
            " failed validation too and changed nothing";
  }
  throw std::invalid_argument(what);
}

MPE_CE_TEMPLATE
void MPE_CE::synchronize() {
  backend_.synchronize();
  throw_deferred();
}

MPE_CE_TEMPLATE
void MPE_CE::prepare_flags(Batch& b, index_t n, index_t B) {
  b.n = n;
  b.B = B;
  b.sorted = false;
  b.awaiting_backward = false;
  b.valid = true;
  b.global_rows.reserve_discard(static_cast<std::size_t>(n));
  b.bag_of.reserve_discard(static_cast<std::size_t>(n));
}

MPE_CE_TEMPLATE
index_t MPE_CE::unique_bound(const Batch& b) const {
  // An asynchronous backend launches min(n, rows) items (U is at most both) and each item
  // checks U itself; a synchronous one reads U for free.
  if constexpr (Backend::asynchronous) {
    return std::min(b.n, total_rows_);
  } else {
    return read_scalar(b.flags.data() + detail::kFlagU);
  }
}

MPE_CE_TEMPLATE
void MPE_CE::sort_unique(Batch& b) {
  const index_t n = b.n;
  const auto sz = static_cast<std::size_t>(n);
  b.sorted_keys.reserve_discard(sz);
  b.sorted_pos.reserve_discard(sz);
  b.heads.reserve_discard(sz);
  b.rank.reserve_discard(sz);
  b.uniq.reserve_discard(sz);
  b.seg_start.reserve_discard(sz + 1);
  b.occ_to_unique.reserve_discard(sz);
  b.sorted = true;
  index_t* count = b.flags.data() + detail::kFlagU;
  if (n == 0) {
    backend_.for_each(1, detail::SetIndex{count, 0});
    backend_.for_each(1, detail::SetIndex{b.seg_start.data(), 0});
    return;
  }
  backend_.for_each(n, detail::PrepareSort{b.global_rows.data(), b.sorted_keys.data(), b.sorted_pos.data(),
                                           b.flags.data() + detail::kFlagOk});
  backend_.stable_sort_by_key(b.sorted_keys.data(), b.sorted_pos.data(), n);
  backend_.for_each(n, detail::MarkHeads{b.sorted_keys.data(), b.heads.data()});
  backend_.exclusive_scan(b.heads.data(), b.rank.data(), n);
  backend_.for_each(1, detail::CountUnique{b.heads.data(), b.rank.data(), n, count, b.seg_start.data()});
  backend_.for_each(
      n, detail::ScatterUnique{b.sorted_keys.data(), b.sorted_pos.data(), b.heads.data(), b.rank.data(),
                               b.uniq.data(), b.seg_start.data(), b.occ_to_unique.data()});
}

MPE_CE_TEMPLATE
void MPE_CE::populate(Batch& b, const Batch* awaiting) {
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
  sort_unique(b);
  const index_t* count = b.flags.data() + detail::kFlagU;
  const index_t U = unique_bound(b);
  backend_.for_each(1, detail::SetLockFloor{counters, awaiting ? awaiting->flags.data() : nullptr,
                                            awaiting ? awaiting->id : 0, b.id});
  const auto sz = static_cast<std::size_t>(U);
  b.keys.reserve_discard(sz);
  b.order.reserve_discard(sz);
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
  backend_.stable_sort_by_key(b.keys.data(), b.order.data(), U);
  backend_.for_each(U, detail::AdmitSet<Storage, Rounding, Cache>{
                           b.keys.data(), b.order.data(), count, gate, b.uniq.data(), b.estimates.data(),
                           cache_ref(), view, store_.data(), stride_, b.id, &counters->lock_floor,
                           config_.seed, step_ptr(), b.slot_of_unique.data(), b.outcome.data(), state});
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
}

MPE_CE_TEMPLATE
void MPE_CE::prefetch(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets) {
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
  staging_.id = ++populate_counter_;
  // Rows of the batch awaiting backward stay locked too.
  populate(staging_, current_.awaiting_backward ? &current_ : nullptr);
  pending_.valid = false;
  std::swap(pending_, staging_);
}

// load(): rebuilds the pending prefetch's batch (host spans, verified by load) as the
// prefetch left it, without a populate: its cache fills, hits and counters are already in
// the loaded state. Its slot assignment is looked up (LookupSlots explains why that equals
// what the populate decided).
MPE_CE_TEMPLATE
void MPE_CE::restore_pending(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets) {
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
}

MPE_CE_TEMPLATE
void MPE_CE::forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                     std::span<float> output, Pooling pooling, std::span<const float> per_sample_weights) {
  const char* fn = "forward";
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
  const bool sizes_equal = pending_.valid && pending_.n == n && pending_.B == B;
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
  if (!use_pending) {
    staging_.id = ++populate_counter_;
    populate(staging_, nullptr);
    pending_.valid = false;
    b = &staging_;
  }
  std::swap(current_, *b);
  b->valid = false;
  Batch& cur = current_;
  const index_t T = num_tables();
  const bool mean = pooling == Pooling::Mean;
  const index_t* gate = cur.flags.data() + detail::kFlagOk;
  backend_.for_each(bags, detail::PoolBags<Storage>{offsets.data(), cur.global_rows.data(),
                                                    num_sets_ > 0 ? cur.occ_to_unique.data() : nullptr,
                                                    num_sets_ > 0 ? cur.slot_of_unique.data() : nullptr, w,
                                                    cache_ref(), false, store_.data(), stride_, cur.B, T,
                                                    config_.dim, mean, output.data(), gate});
  // Backward needs per-occurrence coefficients only for weighted or mean pooling.
  cur.has_coef = w != nullptr || mean;
  if (cur.has_coef) {
    cur.coef.reserve_discard(static_cast<std::size_t>(cur.n));
    backend_.for_each(
        cur.n, detail::Coefficients{offsets.data(), cur.bag_of.data(), w, mean, cur.coef.data(), gate});
  }
  cur.awaiting_backward = true;
}

MPE_CE_TEMPLATE
void MPE_CE::forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                               std::span<float> output, Pooling pooling,
                               std::span<const float> per_sample_weights) const {
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
  backend_.for_each(
      bags, detail::PoolBags<Storage>{offsets.data(), global_rows.data(), nullptr, nullptr, w, cache_ref(),
                                      num_sets_ > 0, store_.data(), stride_, B, num_tables(), config_.dim,
                                      pooling == Pooling::Mean, output.data(), nullptr});
}

MPE_CE_TEMPLATE
template <Optimizer Opt>
void MPE_CE::backward(std::span<const float> grad_output, const Opt& optimizer) {
  using Rule = OptimizerRule<Opt>;
  const char* fn = "backward";
  ++call_seq_;
  Batch& b = current_;
  if (!b.valid || !b.awaiting_backward) {
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
  detail::CallRecord* rec = record_.data();
  detail::Counters* counters = counters_.data();
  backend_.for_each(1, detail::ResetRecord{rec});
  backend_.for_each(static_cast<index_t>(grad_output.size()),
                    detail::CheckFinite{grad_output.data(), &rec->pos[detail::kGrad]});
  // First pass: every row's summed gradient, update and new optimizer state into
  // workspace, checked for overflow before anything is written (one verdict per call).
  if (!b.sorted) sort_unique(b);
  const index_t U = unique_bound(b);
  const index_t* count = b.flags.data() + detail::kFlagU;
  const std::int64_t S = Rule::state_floats(config_.dim);
  b.grad.reserve_discard(static_cast<std::size_t>(U) * config_.dim);
  b.update.reserve_discard(static_cast<std::size_t>(U * S));
  b.outcome.reserve_discard(static_cast<std::size_t>(U));
  backend_.for_each(U, detail::AccumulateRows<Opt>{b.uniq.data(),
                                                   b.seg_start.data(),
                                                   b.sorted_pos.data(),
                                                   b.bag_of.data(),
                                                   b.has_coef ? b.coef.data() : nullptr,
                                                   grad_output.data(),
                                                   b.B,
                                                   T,
                                                   config_.dim,
                                                   optimizer,
                                                   opt_name_.empty() || StatePrecision::cached
                                                       ? nullptr
                                                       : reinterpret_cast<const float*>(opt_state_.data()),
                                                   b.grad.data(),
                                                   b.update.data(),
                                                   step_ptr(),
                                                   rec,
                                                   count,
                                                   b.flags.data() + detail::kFlagOk,
                                                   state_ref(),
                                                   cache_ref(),
                                                   num_sets_ > 0 ? b.slot_of_unique.data() : nullptr});
  backend_.for_each(
      1, detail::SealBackward{rec, grad_output.data(), b.uniq.data(), b.seg_start.data(), b.grad.data(),
                              b.update.data(), config_.dim, S, skip_non_finite(), b.flags.data(),
                              &counters->stats.skipped_steps, deferred() ? deferred_.data() : nullptr,
                              static_cast<index_t>(call_seq_)});
  bool apply = true;  // unknown (gated on the backend) under Validation::Deferred
  if (!deferred()) {
    const detail::CallRecord r = read_record(rec);  // the one wait of this call
    throw_if_failed(fn, r, skip_non_finite(), nullptr);
    apply = r.apply != 0;
  } else if constexpr (!Backend::asynchronous) {
    apply = read_scalar(b.flags.data() + detail::kFlagApply) != 0;
  }
  if (!apply) {  // skipped (NonFinite::Skip, counted on the backend) or a failed batch
    b.awaiting_backward = false;
    return;
  }
  if (opt_name_.empty()) {  // the first applied step allocates the state (zeros)
    if (S > 0) {            // all-zero bytes are 0.0 in every state precision
      opt_state_.reset(static_cast<std::size_t>(total_rows_ * S) * StatePrecision::value_bytes);
      backend_.fill_bytes(opt_state_.data(), 0, opt_state_.bytes());
      if (StatePrecision::cached && num_sets_ > 0) {
        cache_state_.reset(static_cast<std::size_t>(cache_slots() * S));
        backend_.fill_bytes(cache_state_.data(), 0, cache_state_.bytes());
      }
    }
    opt_name_ = Rule::name;
  }
  const index_t* gate = b.flags.data() + detail::kFlagApply;
  backend_.for_each(
      U, detail::ApplyRows<Storage, Rounding>{
             b.uniq.data(), num_sets_ > 0 ? b.slot_of_unique.data() : nullptr, cache_ref(), store_.data(),
             stride_, config_.dim, S,
             S > 0 && !StatePrecision::cached ? reinterpret_cast<float*>(opt_state_.data()) : nullptr,
             b.grad.data(), b.update.data(), config_.seed, step_ptr(), b.outcome.data(), count, gate,
             state_ref()});
  backend_.reduce_to(U, detail::CountOutcome{b.outcome.data(), count, gate}, &counters->tally);
  backend_.for_each(1, detail::FoldCounts{counters, detail::Fold::Backward, 0, nullptr, 0, gate});
  b.awaiting_backward = false;
}

MPE_CE_TEMPLATE
void MPE_CE::flush() {
  const index_t slots = cache_slots();
  if (slots == 0) return;
  detail::Counters* counters = counters_.data();
  const detail::StateRef state = state_ref();
  backend_.for_each(slots,
                    detail::FlushSlots<Storage, Rounding>{cache_ref(), store_.data(), stride_, config_.seed,
                                                          step_ptr(), flush_outcome_.data(), state});
  backend_.reduce_to(slots, detail::CountOutcome{flush_outcome_.data(), nullptr, nullptr}, &counters->tally);
  const auto row_bytes =
      static_cast<std::uint64_t>(Storage::data_bytes(config_.dim)) +
      (state.active() ? static_cast<std::uint64_t>(state.S) * StatePrecision::value_bytes : 0);
  backend_.for_each(1, detail::FoldCounts{counters, detail::Fold::Flush, 0, nullptr, row_bytes, nullptr});
}

MPE_CE_TEMPLATE
void MPE_CE::write_rows(const float* src, index_t first, index_t count, num::RoundingSite site) {
  if (const detail::StateRef state = state_ref(); state.active() && num_sets_ > 0) {
    backend_.for_each(count, detail::KeepStateOfRows<Rounding>{cache_ref(), state, first, step_ptr()});
  }
  backend_.for_each(count, detail::WriteRows<Storage, Rounding>{cache_ref(), store_.data(), stride_, first,
                                                                src, config_.seed, step_ptr(), site});
}

MPE_CE_TEMPLATE
void MPE_CE::set_weights(std::span<const float> weights, std::int64_t first_row) {
  const char* fn = "set_weights";
  throw_deferred();
  check_row_range(fn, "weights", weights.size(), first_row);
  const index_t count = static_cast<index_t>(weights.size()) / config_.dim;
  if (count == 0) return;
  detail::Buffer<float, Backend> staged;
  const float* src = weights.data();
  if constexpr (Backend::device_spans) {
    staged = detail::Buffer<float, Backend>(backend_, weights.size());
    backend_.copy_from_host(staged.data(), weights.data(), weights.size_bytes());
    src = staged.data();
  }
  index_t none = detail::kNoError;
  backend_.copy_from_host(error_.data(), &none, sizeof none);
  backend_.for_each(count, detail::CheckRepresentable<Storage>{src, config_.dim, error_.data()});
  if (const index_t i = read_scalar(error_.data()); i != detail::kNoError) {
    detail::invalid(fn, "weights[" + std::to_string(i) +
                            "] = " + format_float(weights[static_cast<std::size_t>(i)]) + " (row " +
                            std::to_string(first_row + i / config_.dim) + ") cannot be stored as " +
                            Storage::name + " (non-finite or |x| > " + format_float(Storage::limit) + ")");
  }
  write_rows(src, first_row, count, num::RoundingSite::SetWeights);
}

MPE_CE_TEMPLATE
void MPE_CE::get_weights(std::span<float> out, std::int64_t first_row) const {
  check_row_range("get_weights", "out", out.size(), first_row);
  const index_t count = static_cast<index_t>(out.size()) / config_.dim;
  if (count == 0) return;
  if constexpr (Backend::device_spans) {
    detail::Buffer<float, Backend> staged(backend_, out.size());
    backend_.for_each(count, detail::ReadRows<Storage>{ref(), first_row, staged.data()});
    backend_.copy_to_host(out.data(), staged.data(), out.size_bytes());
  } else {
    backend_.for_each(count, detail::ReadRows<Storage>{ref(), first_row, out.data()});
  }
}

MPE_CE_TEMPLATE
void MPE_CE::init_uniform(float low, float high) {
  const char* fn = "init_uniform";
  if (!num::is_finite(low) || !num::is_finite(high) || !(low < high) || low < -Storage::limit ||
      high > Storage::limit) {
    detail::invalid(fn, "[low, high) = [" + format_float(low) + ", " + format_float(high) +
                            ") must be finite, non-empty and within +-" + format_float(Storage::limit));
  }
  const index_t chunk = std::min<index_t>(65536, total_rows_);
  detail::Buffer<float, Backend> buf(backend_, static_cast<std::size_t>(chunk) * config_.dim);
  for (index_t first = 0; first < total_rows_; first += chunk) {
    const index_t count = std::min(chunk, total_rows_ - first);
    backend_.for_each(count, detail::UniformRows{config_.seed, first, config_.dim, low, high, buf.data()});
    write_rows(buf.data(), first, count, num::RoundingSite::Init);
  }
}

MPE_CE_TEMPLATE
MemoryFootprint MPE_CE::memory() const {
  MemoryFootprint m;
  m.store_bytes = store_.bytes();
  m.cache_bytes = cache_rows_.bytes() + tags_.bytes() + last_use_.bytes() + dirty_.bytes() + meta_.bytes();
  m.optimizer_bytes = opt_state_.bytes() + cache_state_.bytes();
  m.metadata_bytes = table_offsets_.bytes() + counters_.bytes();
  m.workspace_bytes = current_.bytes() + pending_.bytes() + staging_.bytes() + error_.bytes() +
                      flush_outcome_.bytes() + record_.bytes() + deferred_.bytes();
  return m;
}

#undef MPE_CE_TEMPLATE
#undef MPE_CE

}  // namespace mpe
