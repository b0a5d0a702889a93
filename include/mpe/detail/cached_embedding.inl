// SPDX-License-Identifier: Apache-2.0
// Implementation of mpe::CachedEmbedding (included by cached_embedding.hpp).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>

#include "mpe/detail/kernels.hpp"

namespace mpe {

#define MPE_CE_TEMPLATE \
  template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend>
#define MPE_CE CachedEmbedding<Storage, Cache, Rounding, Backend>

namespace detail {
inline std::string ce_prefix(const char* fn) { return std::string("mpe::CachedEmbedding::") + fn + ": "; }
[[noreturn]] inline void invalid(const char* fn, const std::string& what) {
  throw std::invalid_argument(ce_prefix(fn) + what);
}
}  // namespace detail

MPE_CE_TEMPLATE
void MPE_CE::Batch::set_backend(const Backend& b) {
  for (IBuf* p : {&global_rows, &bag_of, &sorted_keys, &sorted_pos, &heads, &rank, &uniq, &seg_start,
                  &occ_to_unique, &slot_of_unique, &order, &indices_copy, &offsets_copy}) {
    p->set_backend(b);
  }
  keys.set_backend(b);
  estimates.set_backend(b);
  outcome.set_backend(b);
  coef.set_backend(b);
  grad.set_backend(b);
}

MPE_CE_TEMPLATE
std::size_t MPE_CE::Batch::bytes() const {
  std::size_t s = 0;
  for (const IBuf* p : {&global_rows, &bag_of, &sorted_keys, &sorted_pos, &heads, &rank, &uniq, &seg_start,
                        &occ_to_unique, &slot_of_unique, &order, &indices_copy, &offsets_copy}) {
    s += p->bytes();
  }
  return s + keys.bytes() + estimates.bytes() + outcome.bytes() + coef.bytes() + grad.bytes();
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

  for (auto* b : {&current_, &pending_, &staging_}) b->set_backend(backend_);
  table_offsets_.set_backend(backend_);
  store_.set_backend(backend_);
  cache_rows_.set_backend(backend_);
  tags_.set_backend(backend_);
  last_use_.set_backend(backend_);
  dirty_.set_backend(backend_);
  sketch_.set_backend(backend_);
  opt_state_.set_backend(backend_);
  error_.set_backend(backend_);
  flush_outcome_.set_backend(backend_);
  // Placement hints for the backend (CudaBackend may put the store in managed or
  // host-mapped memory) and users' memory pools.
  table_offsets_.set_purpose(MemoryPurpose::Metadata);
  store_.set_purpose(MemoryPurpose::Store);
  cache_rows_.set_purpose(MemoryPurpose::Cache);
  tags_.set_purpose(MemoryPurpose::Cache);
  last_use_.set_purpose(MemoryPurpose::Cache);
  dirty_.set_purpose(MemoryPurpose::Cache);
  sketch_.set_purpose(MemoryPurpose::Cache);
  opt_state_.set_purpose(MemoryPurpose::Optimizer);

  table_offsets_.reset(table_offsets_host_.size());
  backend_.copy_from_host(table_offsets_.data(), table_offsets_host_.data(), table_offsets_.bytes());
  store_.reset(static_cast<std::size_t>(total_rows_) * stride_);
  // All-zero bytes decode to 0.0 in every format (Int8/Int4: scale 0, bias 0).
  backend_.fill_bytes(store_.data(), 0, store_.bytes());
  error_.reset(1);

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
    if constexpr (Cache::uses_sketch) {
      sketch_width_ = 16;
      while (sketch_width_ < 2 * static_cast<index_t>(slots)) sketch_width_ *= 2;
      sketch_.reset(static_cast<std::size_t>(SketchRef::depth * sketch_width_));
      backend_.fill_bytes(sketch_.data(), 0, sketch_.bytes());
    }
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
index_t MPE_CE::read_scalar(const index_t* p) const {
  index_t v;
  backend_.copy_to_host(&v, p, sizeof v);
  return v;
}

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
void MPE_CE::throw_index_error(const char* fn, std::span<const std::int64_t> indices,
                               std::span<const std::int64_t> offsets, index_t B, index_t pos) const {
  // Error path only: bring the offsets and the offending value to the host.
  std::vector<index_t> off(offsets.size());
  backend_.copy_to_host(off.data(), offsets.data(), off.size() * sizeof(index_t));
  index_t v;
  backend_.copy_to_host(&v, indices.data() + pos, sizeof v);
  const auto bag = static_cast<index_t>(std::upper_bound(off.begin(), off.end(), pos) - off.begin()) - 1;
  const index_t t = B > 0 ? bag / B : 0;
  detail::invalid(fn, "indices[" + std::to_string(pos) + "] = " + std::to_string(v) + " is outside table " +
                          std::to_string(t) + " (" +
                          std::to_string(config_.table_rows[static_cast<std::size_t>(t)]) + " rows; bag " +
                          std::to_string(bag) + ")");
}

MPE_CE_TEMPLATE
void MPE_CE::check_weights(const char* fn, index_t* err, std::size_t n, std::span<const float> weights,
                           Pooling pooling, bool* non_finite) const {
  if (weights.empty()) return;
  if (pooling != Pooling::Sum) detail::invalid(fn, "per_sample_weights are only allowed with Pooling::Sum");
  if (weights.size() != n) {
    detail::invalid(fn, "per_sample_weights.size() = " + std::to_string(weights.size()) +
                            "; must equal indices.size() = " + std::to_string(n));
  }
  const index_t none = detail::kNoError;
  backend_.copy_from_host(err, &none, sizeof none);
  backend_.for_each(static_cast<index_t>(n), detail::CheckFinite{weights.data(), err});
  if (const index_t i = read_scalar(err); i != detail::kNoError) {
    if (non_finite) {  // NonFinite::Skip: the caller skips the step instead
      *non_finite = true;
      backend_.copy_from_host(err, &none, sizeof none);  // err is reused by the index check
      return;
    }
    float v;
    backend_.copy_to_host(&v, weights.data() + i, sizeof v);
    detail::invalid(fn,
                    "per_sample_weights[" + std::to_string(i) + "] = " + format_float(v) + " is not finite");
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
void MPE_CE::validate_and_expand(const char* fn, index_t* err, std::span<const std::int64_t> indices,
                                 std::span<const std::int64_t> offsets, std::span<const float> weights,
                                 Pooling pooling, std::size_t output_size, index_t& B, index_t* global_rows,
                                 index_t* bag_of, bool* non_finite) const {
  const index_t T = num_tables();
  const auto n = static_cast<index_t>(indices.size());
  if (offsets.empty() || (offsets.size() - 1) % static_cast<std::size_t>(T) != 0) {
    detail::invalid(fn, "offsets.size() = " + std::to_string(offsets.size()) +
                            "; must be T*B + 1 with T = " + std::to_string(T));
  }
  B = static_cast<index_t>(offsets.size() - 1) / T;
  const index_t first = read_scalar(offsets.data());
  const index_t last = read_scalar(offsets.data() + offsets.size() - 1);
  if (first != 0) detail::invalid(fn, "offsets[0] = " + std::to_string(first) + "; must be 0");
  if (last != n) {
    detail::invalid(fn, "offsets[" + std::to_string(offsets.size() - 1) + "] = " + std::to_string(last) +
                            "; must equal indices.size() = " + std::to_string(n));
  }
  if (output_size != kSkipOutputCheck) check_output_size(fn, output_size, B);
  const index_t none = detail::kNoError;
  backend_.copy_from_host(err, &none, sizeof none);
  backend_.for_each(B * T, detail::CheckOffsets{offsets.data(), err});
  if (const index_t j = read_scalar(err); j != detail::kNoError) {
    const index_t a = read_scalar(offsets.data() + j), b = read_scalar(offsets.data() + j + 1);
    detail::invalid(fn, "offsets[" + std::to_string(j + 1) + "] = " + std::to_string(b) + " < offsets[" +
                            std::to_string(j) + "] = " + std::to_string(a) +
                            "; offsets must be non-decreasing");
  }
  check_weights(fn, err, indices.size(), weights, pooling, non_finite);
  backend_.for_each(B * T, detail::ExpandBags{indices.data(), offsets.data(), table_offsets_.data(), B,
                                              global_rows, bag_of, err});
  if (const index_t i = read_scalar(err); i != detail::kNoError)
    throw_index_error(fn, indices, offsets, B, i);
}

MPE_CE_TEMPLATE
void MPE_CE::prepare_batch(const char* fn, Batch& b, std::span<const std::int64_t> indices,
                           std::span<const std::int64_t> offsets, std::span<const float> weights,
                           Pooling pooling, std::size_t output_size, bool* non_finite) const {
  const auto n = indices.size();
  b.global_rows.reserve_discard(n);
  b.bag_of.reserve_discard(n);
  validate_and_expand(fn, error_.data(), indices, offsets, weights, pooling, output_size, b.B,
                      b.global_rows.data(), b.bag_of.data(), non_finite);
  b.n = static_cast<index_t>(n);
  b.U = 0;
  b.sorted = false;
  b.awaiting_backward = false;
  b.valid = true;
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
  if (n == 0) {
    b.U = 0;
    const index_t zero = 0;
    backend_.copy_from_host(b.seg_start.data(), &zero, sizeof zero);
    return;
  }
  backend_.for_each(n, detail::PrepareSort{b.global_rows.data(), b.sorted_keys.data(), b.sorted_pos.data()});
  backend_.stable_sort_by_key(b.sorted_keys.data(), b.sorted_pos.data(), n);
  backend_.for_each(n, detail::MarkHeads{b.sorted_keys.data(), b.heads.data()});
  backend_.exclusive_scan(b.heads.data(), b.rank.data(), n);
  b.U = read_scalar(b.rank.data() + n - 1) + read_scalar(b.heads.data() + n - 1);
  backend_.for_each(
      n, detail::ScatterUnique{b.sorted_keys.data(), b.sorted_pos.data(), b.heads.data(), b.rank.data(),
                               b.uniq.data(), b.seg_start.data(), b.occ_to_unique.data()});
  backend_.copy_from_host(b.seg_start.data() + b.U, &n, sizeof n);
}

MPE_CE_TEMPLATE
void MPE_CE::populate(Batch& b, std::uint64_t lock_floor) {
  stats_.lookups += static_cast<std::uint64_t>(b.n);
  if (num_sets_ == 0) return;
  sort_unique(b);
  const index_t U = b.U;
  stats_.unique_rows += static_cast<std::uint64_t>(U);
  if (U == 0) return;
  const auto sz = static_cast<std::size_t>(U);
  b.keys.reserve_discard(sz);
  b.order.reserve_discard(sz);
  b.slot_of_unique.reserve_discard(sz);
  b.outcome.reserve_discard(sz);
  SketchRef sketch{sketch_.data(), sketch_width_};
  if constexpr (Cache::uses_sketch) {
    b.estimates.reserve_discard(sz);
    backend_.for_each(U, detail::SketchIncrement{b.uniq.data(), sketch});
  }
  backend_.for_each(
      U, detail::AdmissionKeys<Cache::uses_sketch>{b.uniq.data(), sketch, num_sets_, b.estimates.data(),
                                                   b.keys.data(), b.order.data()});
  backend_.stable_sort_by_key(b.keys.data(), b.order.data(), U);
  backend_.for_each(U, detail::AdmitSet<Storage, Rounding, Cache::uses_sketch>{
                           b.keys.data(), b.order.data(), U, b.uniq.data(), b.estimates.data(), cache_ref(),
                           sketch, store_.data(), stride_, b.id, lock_floor, config_.seed,
                           static_cast<std::uint32_t>(step_), b.slot_of_unique.data(), b.outcome.data()});
  const detail::OutcomeCounts c =
      backend_.template sum<detail::OutcomeCounts>(U, detail::CountOutcome{b.outcome.data()});
  stats_.hits += c.hits;
  stats_.misses += static_cast<std::uint64_t>(U) - c.hits;
  stats_.conflict_misses += c.conflicts;
  stats_.lfu_rejections += c.rejected;
  stats_.evictions += c.evicted;
  stats_.writebacks += c.wrote_back;
  stats_.saturated_rows += c.saturated;
  stats_.bytes_filled += c.filled * Storage::data_bytes(config_.dim);
  stats_.bytes_written_back += c.wrote_back * Storage::data_bytes(config_.dim);
  if constexpr (Cache::uses_sketch) {
    sketch_increments_ += static_cast<std::uint64_t>(U);
    const auto period = static_cast<std::uint64_t>(10 * cache_slots());
    while (sketch_increments_ >= period) {
      backend_.for_each(static_cast<index_t>(sketch_.size()), detail::SketchHalve{sketch_.data()});
      sketch_increments_ -= period;
    }
  }
}

MPE_CE_TEMPLATE
bool MPE_CE::same_batch(const Batch& b, std::span<const std::int64_t> indices,
                        std::span<const std::int64_t> offsets) const {
  if (!b.valid || static_cast<std::size_t>(b.n) != indices.size() ||
      static_cast<std::size_t>(b.n) > b.indices_copy.size() || offsets.size() > b.offsets_copy.size()) {
    return false;
  }
  if (static_cast<std::size_t>(b.B * num_tables() + 1) != offsets.size()) return false;
  return backend_.equal_bytes(b.indices_copy.data(), indices.data(), indices.size_bytes()) &&
         backend_.equal_bytes(b.offsets_copy.data(), offsets.data(), offsets.size_bytes());
}

MPE_CE_TEMPLATE
void MPE_CE::prefetch(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets) {
  prepare_batch("prefetch", staging_, indices, offsets, {}, Pooling::Sum, kSkipOutputCheck);
  staging_.indices_copy.reserve_discard(indices.size());
  staging_.offsets_copy.reserve_discard(offsets.size());
  backend_.copy(staging_.indices_copy.data(), indices.data(), indices.size_bytes());
  backend_.copy(staging_.offsets_copy.data(), offsets.data(), offsets.size_bytes());
  staging_.id = ++populate_counter_;
  const std::uint64_t floor = current_.awaiting_backward ? current_.id : staging_.id;
  populate(staging_, floor);
  pending_.valid = false;
  std::swap(pending_, staging_);
}

MPE_CE_TEMPLATE
void MPE_CE::forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                     std::span<float> output, Pooling pooling, std::span<const float> per_sample_weights) {
  const char* fn = "forward";
  bool skip = false;
  bool* non_finite = config_.non_finite == NonFinite::Skip ? &skip : nullptr;
  Batch* b;
  if (same_batch(pending_, indices, offsets)) {
    // Validated and populated by prefetch(); check only this call's own arguments.
    check_output_size(fn, output.size(), pending_.B);
    check_weights(fn, error_.data(), indices.size(), per_sample_weights, pooling, non_finite);
    b = &pending_;
  } else {
    prepare_batch(fn, staging_, indices, offsets, per_sample_weights, pooling, output.size(), non_finite);
    staging_.id = ++populate_counter_;
    populate(staging_, staging_.id);
    pending_.valid = false;
    b = &staging_;
  }
  std::swap(current_, *b);
  b->valid = false;
  Batch& cur = current_;
  const index_t T = num_tables();
  const bool mean = pooling == Pooling::Mean;
  const float* w = per_sample_weights.empty() ? nullptr : per_sample_weights.data();
  const bool cached = num_sets_ > 0 && cur.U > 0;
  backend_.for_each(cur.B * T, detail::PoolBags<Storage>{offsets.data(), cur.global_rows.data(),
                                                         cached ? cur.occ_to_unique.data() : nullptr,
                                                         cached ? cur.slot_of_unique.data() : nullptr, w,
                                                         cache_ref(), false, store_.data(), stride_, cur.B, T,
                                                         config_.dim, mean, output.data()});
  // Backward needs per-occurrence coefficients only for weighted or mean pooling.
  cur.has_coef = w != nullptr || mean;
  if (cur.has_coef) {
    cur.coef.reserve_discard(static_cast<std::size_t>(cur.n));
    backend_.for_each(cur.n,
                      detail::Coefficients{offsets.data(), cur.bag_of.data(), w, mean, cur.coef.data()});
  }
  cur.skip_step = skip;
  cur.awaiting_backward = true;
}

MPE_CE_TEMPLATE
void MPE_CE::forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                               std::span<float> output, Pooling pooling,
                               std::span<const float> per_sample_weights) const {
  // Own buffers, so concurrent const calls never share workspace.
  IBuf global_rows(backend_, indices.size()), bag_of(backend_, indices.size()), err(backend_, 1);
  index_t B = 0;
  const index_t T = num_tables();
  validate_and_expand("forward_inference", err.data(), indices, offsets, per_sample_weights, pooling,
                      output.size(), B, global_rows.data(), bag_of.data());
  backend_.for_each(
      B * T, detail::PoolBags<Storage>{offsets.data(), global_rows.data(), nullptr, nullptr,
                                       per_sample_weights.empty() ? nullptr : per_sample_weights.data(),
                                       cache_ref(), num_sets_ > 0, store_.data(), stride_, B, T, config_.dim,
                                       pooling == Pooling::Mean, output.data()});
}

MPE_CE_TEMPLATE
template <class Optimizer>
void MPE_CE::backward(std::span<const float> grad_output, const Optimizer& optimizer) {
  using Rule = OptimizerRule<Optimizer>;
  const char* fn = "backward";
  Batch& b = current_;
  if (!b.valid || !b.awaiting_backward) {
    throw std::logic_error(detail::ce_prefix(fn) + "no forward() is awaiting backward()");
  }
  if (opt_kind_ != 0 && opt_kind_ != Rule::kind) {
    throw std::logic_error(detail::ce_prefix(fn) + "the optimizer kind changed to " + Rule::name +
                           "; one table trains with one optimizer (its state is per kind)");
  }
  if (const std::string bad = Rule::check(optimizer); !bad.empty()) detail::invalid(fn, bad);
  const index_t T = num_tables();
  const auto expect = static_cast<std::size_t>(b.B * T * config_.dim);
  if (grad_output.size() != expect) {
    detail::invalid(fn, "grad_output.size() = " + std::to_string(grad_output.size()) +
                            "; expected B*T*D = " + std::to_string(expect));
  }
  if (b.skip_step) {  // the forward had non-finite per-sample weights (NonFinite::Skip)
    ++stats_.skipped_steps;
    b.awaiting_backward = false;
    return;
  }
  index_t none = detail::kNoError;
  backend_.copy_from_host(error_.data(), &none, sizeof none);
  backend_.for_each(static_cast<index_t>(grad_output.size()),
                    detail::CheckFinite{grad_output.data(), error_.data()});
  if (const index_t i = read_scalar(error_.data()); i != detail::kNoError) {
    if (config_.non_finite == NonFinite::Skip) {
      ++stats_.skipped_steps;
      b.awaiting_backward = false;
      return;
    }
    float v;
    backend_.copy_to_host(&v, grad_output.data() + i, sizeof v);
    detail::invalid(fn, "grad_output[" + std::to_string(i) + "] = " + format_float(v) + " is not finite");
  }
  if (opt_kind_ == 0) {
    if constexpr (Rule::state_floats > 0) {
      opt_state_.reset(static_cast<std::size_t>(total_rows_) * Rule::state_floats);
      backend_.fill_bytes(opt_state_.data(), 0, opt_state_.bytes());
    }
    opt_kind_ = Rule::kind;
  }
  if (!b.sorted) sort_unique(b);
  const index_t U = b.U;
  if (U > 0) {
    b.grad.reserve_discard(static_cast<std::size_t>(U) * config_.dim);
    b.outcome.reserve_discard(static_cast<std::size_t>(U));
    const bool cached = num_sets_ > 0;
    backend_.for_each(
        U, detail::UpdateRows<Storage, Rounding, Rule, Optimizer>{
               b.uniq.data(), b.seg_start.data(), b.sorted_pos.data(), b.bag_of.data(),
               b.has_coef ? b.coef.data() : nullptr, grad_output.data(),
               cached ? b.slot_of_unique.data() : nullptr, cache_ref(), store_.data(), stride_, b.B, T,
               config_.dim, optimizer, Rule::state_floats > 0 ? opt_state_.data() : nullptr, b.grad.data(),
               config_.seed, static_cast<std::uint32_t>(step_), b.outcome.data()});
    const detail::OutcomeCounts c =
        backend_.template sum<detail::OutcomeCounts>(U, detail::CountOutcome{b.outcome.data()});
    stats_.saturated_rows += c.saturated;
  }
  ++step_;
  b.awaiting_backward = false;
}

MPE_CE_TEMPLATE
void MPE_CE::flush() {
  const index_t slots = cache_slots();
  if (slots == 0) return;
  backend_.for_each(
      slots, detail::FlushSlots<Storage, Rounding>{cache_ref(), store_.data(), stride_, config_.seed,
                                                   static_cast<std::uint32_t>(step_), flush_outcome_.data()});
  const detail::OutcomeCounts c =
      backend_.template sum<detail::OutcomeCounts>(slots, detail::CountOutcome{flush_outcome_.data()});
  stats_.writebacks += c.wrote_back;
  stats_.saturated_rows += c.saturated;
  stats_.bytes_written_back += c.wrote_back * Storage::data_bytes(config_.dim);
}

MPE_CE_TEMPLATE
void MPE_CE::write_rows(const float* src, index_t first, index_t count, num::RoundingSite site) {
  backend_.for_each(
      count, detail::WriteRows<Storage, Rounding>{cache_ref(), store_.data(), stride_, first, src,
                                                  config_.seed, static_cast<std::uint32_t>(step_), site});
}

MPE_CE_TEMPLATE
void MPE_CE::set_weights(std::span<const float> weights, std::int64_t first_row) {
  const char* fn = "set_weights";
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
  m.cache_bytes = cache_rows_.bytes() + tags_.bytes() + last_use_.bytes() + dirty_.bytes() + sketch_.bytes();
  m.optimizer_bytes = opt_state_.bytes();
  m.metadata_bytes = table_offsets_.bytes();
  m.workspace_bytes =
      current_.bytes() + pending_.bytes() + staging_.bytes() + error_.bytes() + flush_outcome_.bytes();
  return m;
}

#undef MPE_CE_TEMPLATE
#undef MPE_CE

}  // namespace mpe
