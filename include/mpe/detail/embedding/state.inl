// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/state.inl
/// @brief CachedEmbedding: the exact state as a TableState (state(), restore_state()) and the
/// row-level access of importers (read_store_rows(), import_store_rows()) (included by
/// mpe/embedding/cached_embedding.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mpe/detail/embedding/state_rows.hpp"
#include "mpe/detail/kernels/all.hpp"

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
TableState CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::state() const {
  TableState s;
  s.storage = Storage::name;
  s.cache_policy = Cache::name;
  s.rounding = Rounding::name;
  s.state_precision = StatePrecision::name;
  s.ways = static_cast<std::int32_t>(Cache::ways);
  s.dim = config_.dim;
  s.table_rows = config_.table_rows;
  s.store = {store_.data(), static_cast<std::size_t>(total_rows_) * stride_};
  s.store_stride = stride_;
  s.store_holds_slot_index = slot_offset_ > 0;
  s.cache_rows = {cache_rows_.data(), cache_rows_.size()};
  s.tags = {tags_.data(), tags_.size()};
  s.last_use = {last_use_.data(), last_use_.size()};
  s.dirty = {dirty_.data(), dirty_.size()};
  s.policy_words = {meta_.data(), meta_.size()};
  s.optimizer = opt_name_;
  s.state_values_per_row = static_cast<std::uint32_t>(state_floats());
  s.optimizer_state = {opt_state_.data(), opt_state_.bytes()};
  s.cached_optimizer_state = {cache_state_.data(), cache_state_.size()};
  const detail::Counters counters = read_counters();
  s.stats = counters.stats;
  s.step = counters.step;
  s.decay_clock = counters.decay_clock;
  // defer_admission: a forward() whose admission is owed is not counted (neither its
  // populate number nor its call): the state is the one before it.
  const bool unadmitted = current_.admission_owed();
  s.populate_counter = unadmitted ? current_.id - 1 : populate_counter_;
  s.calls = unadmitted ? call_seq_ - 1 : call_seq_;
  s.seed = config_.seed;
  const Batch& p = pending_;
  if (p.prefetched() && read_scalar(p.flags.data() + detail::kFlagOk) != 0) {
    s.pending_indices = {p.indices_copy.data(), static_cast<std::size_t>(p.n)};
    s.pending_offsets = {p.offsets_copy.data(), static_cast<std::size_t>(p.B * num_tables()) + 1};
  }
  return s;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::restore_state(const TableState& in) {
  const char* fn = "restore_state";
  throw_deferred();
  const auto slots = static_cast<std::size_t>(cache_slots());
  const auto R = static_cast<std::size_t>(total_rows_);
  const std::size_t fs = state_row_bytes();
  const auto expect = [&](const char* part, std::size_t got, std::size_t want, const std::string& what) {
    if (got != want) {
      detail::invalid(fn, std::string("image.") + part + ".size() = " + std::to_string(got) + "; expected " +
                              std::to_string(want) + " (" + what + ")");
    }
  };
  const auto same = [&](const char* part, std::string_view got, std::string_view want, const char* what) {
    if (got != want) {
      detail::invalid(fn, std::string("image.") + part + " = '" + std::string(got) + "' but this table's " +
                              what + " is '" + std::string(want) +
                              "'; an image restores only into a table of its own policies");
    }
  };
  same("storage", in.storage, Storage::name, "Storage");
  same("cache_policy", in.cache_policy, Cache::name, "Cache");
  same("rounding", in.rounding, Rounding::name, "Rounding");
  same("state_precision", in.state_precision, StatePrecision::name, "StatePrecision");
  if (in.ways != static_cast<std::int32_t>(Cache::ways) || in.dim != config_.dim) {
    detail::invalid(fn, "image.ways = " + std::to_string(in.ways) +
                            ", image.dim = " + std::to_string(in.dim) + "; this table has " +
                            std::to_string(Cache::ways) + " ways and D = " + std::to_string(config_.dim));
  }
  if (!std::equal(in.table_rows.begin(), in.table_rows.end(), config_.table_rows.begin(),
                  config_.table_rows.end())) {
    std::string rows;
    for (std::size_t t = 0; t < in.table_rows.size() && t < 8; ++t) {
      rows += (t ? ", " : "") + std::to_string(in.table_rows[t]);
    }
    if (in.table_rows.size() > 8) rows += ", ...";
    detail::invalid(fn, "image.table_rows = [" + rows + "] (" + std::to_string(in.table_rows.size()) +
                            " tables) differ from this table's config().table_rows (" +
                            std::to_string(config_.table_rows.size()) + " tables)");
  }
  if (in.store_holds_slot_index) {
    detail::invalid(fn,
                    "image.store_holds_slot_index = true; the image's store rows must be in state form "
                    "(no slot-index entries): copy them with read_store_rows()");
  }
  if (in.store_stride != fs) {
    detail::invalid(fn, "image.store_stride = " + std::to_string(in.store_stride) +
                            "; expected state_row_bytes() = " + std::to_string(fs));
  }
  expect("store", in.store.size(), R * fs,
         "rows x state_row_bytes() = " + std::to_string(R) + " x " + std::to_string(fs));
  expect("cache_rows", in.cache_rows.size(), slots * static_cast<std::size_t>(config_.dim),
         "slots x D = " + std::to_string(slots) + " x " + std::to_string(config_.dim));
  expect("tags", in.tags.size(), slots, "slots");
  expect("last_use", in.last_use.size(), slots, "slots");
  expect("dirty", in.dirty.size(), slots, "slots");
  expect("policy_words", in.policy_words.size(), static_cast<std::size_t>(Cache::meta_words(cache_slots())),
         std::string(Cache::name) + "'s meta_words(slots)");
  std::int64_t S = 0;
  if (!in.optimizer.empty() && !detail::known_state_floats(in.optimizer, config_.dim, S)) {
    detail::invalid(fn, "image.optimizer = '" + in.optimizer + "' is not one of KnownOptimizers");
  }
  if (in.state_values_per_row != static_cast<std::uint64_t>(S)) {
    detail::invalid(fn, "image.state_values_per_row = " + std::to_string(in.state_values_per_row) +
                            "; expected " + std::to_string(S) + " for optimizer '" +
                            (in.optimizer.empty() ? std::string("none") : in.optimizer) + "' at dim " +
                            std::to_string(config_.dim));
  }
  const std::size_t opt_bytes =
      detail::EmbeddingLayout::state_bytes(total_rows_, S, StatePrecision::value_bytes);
  const std::size_t opt_cache_floats =
      S > 0 ? detail::EmbeddingLayout::cached_state_floats(slots, S, StatePrecision::cached) : 0;
  expect("optimizer_state", in.optimizer_state.size(), opt_bytes,
         "rows x S x value_bytes = " + std::to_string(R) + " x " + std::to_string(S) + " x " +
             std::to_string(StatePrecision::value_bytes));
  expect("cached_optimizer_state", in.cached_optimizer_state.size(), opt_cache_floats,
         StatePrecision::cached ? "slots x S" : "none with " + std::string(StatePrecision::name));
  if (in.pending_offsets.empty()) {
    expect("pending_indices", in.pending_indices.size(), 0, "no pending batch: pending_offsets is empty");
  } else if ((in.pending_offsets.size() - 1) % static_cast<std::size_t>(num_tables()) != 0) {
    detail::invalid(fn, "image.pending_offsets.size() = " + std::to_string(in.pending_offsets.size()) +
                            "; expected T*B + 1 with T = " + std::to_string(num_tables()));
  } else if (const std::string why = detail::csr_batch_fault(config_.table_rows, in.pending_indices,
                                                             in.pending_offsets);
             !why.empty()) {  // a valid batch of this table's rows, as prefetch() took it
    detail::invalid(fn, "image.pending_" + why);
  }
  // ---- commit: allocation first (a failure leaves the object unchanged), then copies ----
  detail::Buffer<std::uint8_t, Backend> opt;
  opt.set_backend(backend_);
  opt.set_purpose(MemoryPurpose::Optimizer);
  const bool new_opt = opt_bytes != opt_state_.bytes();
  if (new_opt) opt.reset(opt_bytes);
  detail::Buffer<float, Backend> opt_cache;
  opt_cache.set_backend(backend_);
  opt_cache.set_purpose(MemoryPurpose::Optimizer);
  const bool new_opt_cache = opt_cache_floats * 4 != cache_state_.bytes();
  if (new_opt_cache) opt_cache.reset(opt_cache_floats);
  // The rows (each slot index entry -1 until reindex_slots() below); settles a pending
  // admission first, as every state change does.
  write_state_rows(0, R, in.store.data());
  const auto copy = [&](void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) backend_.copy_from_host(dst, src, bytes);
  };
  copy(cache_rows_.data(), in.cache_rows.data(), in.cache_rows.size_bytes());
  copy(tags_.data(), in.tags.data(), in.tags.size_bytes());
  copy(last_use_.data(), in.last_use.data(), in.last_use.size_bytes());
  copy(dirty_.data(), in.dirty.data(), in.dirty.size_bytes());
  copy(meta_.data(), in.policy_words.data(), in.policy_words.size_bytes());
  copy(new_opt ? opt.data() : opt_state_.data(), in.optimizer_state.data(), opt_bytes);
  if (new_opt) opt_state_.swap(opt);
  reindex_slots();
  copy(new_opt_cache ? opt_cache.data() : cache_state_.data(), in.cached_optimizer_state.data(),
       in.cached_optimizer_state.size_bytes());
  if (new_opt_cache) cache_state_.swap(opt_cache);
  config_.seed = in.seed;
  detail::Counters counters{};
  counters.stats = in.stats;
  counters.step = in.step;
  counters.decay_clock = in.decay_clock;
  backend_.copy_from_host(counters_.data(), &counters, sizeof counters);
  populate_counter_ = in.populate_counter;
  call_seq_ = in.calls;
  opt_name_ = in.optimizer;
  // The batch awaiting backward() is dropped (with an admission it owes: defer_admission).
  for (auto* b : {&current_, &pending_, &staging_}) b->stage = detail::BatchStage::empty;
  if (!in.pending_offsets.empty()) restore_pending(in.pending_indices, in.pending_offsets);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::read_store_rows(
    std::int64_t first_row, std::size_t count, std::vector<std::uint8_t>& out) const {
  if (first_row < 0 || first_row > total_rows_ || count > static_cast<std::size_t>(total_rows_ - first_row)) {
    detail::invalid("read_store_rows", "first_row = " + std::to_string(first_row) +
                                           " with count = " + std::to_string(count) +
                                           " leaves the table of " + std::to_string(total_rows_) + " rows");
  }
  const std::size_t stride = stride_, fs = state_row_bytes();
  const std::size_t data = Storage::data_bytes(config_.dim);
  out.resize(count * stride);
  const std::uint8_t* src = store_.data() + static_cast<std::size_t>(first_row) * stride;
  backend_.copy_to_host(out.data(), src, out.size());
  if (slot_offset_ == 0) return;  // the store's rows are the state's
  // In place: row r moves down to r * fs.
  for (std::size_t r = 0; r < count; ++r) {
    std::memmove(out.data() + r * fs, out.data() + r * stride, data);
    std::memset(out.data() + r * fs + data, 0, fs - data);
  }
  out.resize(count * fs);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::import_store_rows(
    std::int64_t first_row, std::span<const std::uint8_t> rows, std::int64_t saturated_rows) {
  const char* fn = "import_store_rows";
  const std::size_t fs = state_row_bytes();
  if (rows.size() % fs != 0) {
    detail::invalid(fn, "rows.size() = " + std::to_string(rows.size()) +
                            " is not a multiple of state_row_bytes() = " + std::to_string(fs));
  }
  const std::size_t count = rows.size() / fs;
  if (first_row < 0 || first_row > total_rows_ || count > static_cast<std::size_t>(total_rows_ - first_row)) {
    detail::invalid(fn, "first_row = " + std::to_string(first_row) + " with " + std::to_string(count) +
                            " rows leaves the table of " + std::to_string(total_rows_) + " rows");
  }
  if (saturated_rows < 0)
    detail::invalid(fn, "saturated_rows = " + std::to_string(saturated_rows) + " is negative");
  for (std::size_t r = 0; r < count; ++r) {
    if (const std::string why = detail::state_row_fault<Storage>(rows.data() + r * fs, config_.dim, fs);
        !why.empty()) {
      detail::invalid(fn, "rows: row " + std::to_string(r) + " (global row " +
                              std::to_string(first_row + static_cast<std::int64_t>(r)) + ") " + why);
    }
  }
  write_state_rows(first_row, count, rows.data());
  drop_rows(first_row, static_cast<index_t>(count));
  if (saturated_rows > 0) {
    backend_.for_each(1, detail::AddCount{&counters_.data()->stats.saturated_rows,
                                          static_cast<std::uint64_t>(saturated_rows)});
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::write_state_rows(
    index_t first, std::size_t count, const std::uint8_t* rows) {
  admit_pending();  // settled before the rows change (import_store_rows, restore_state), as write_rows() does
  const std::size_t stride = stride_, fs = state_row_bytes();
  std::uint8_t* dst = store_.data() + static_cast<std::size_t>(first) * stride;
  if (slot_offset_ == 0) {
    if (count > 0) backend_.copy_from_host(dst, rows, count * stride);
    return;
  }
  const std::int32_t empty = -1;
  const std::size_t per = std::max<std::size_t>(1, (std::size_t{4} << 20) / stride);
  std::vector<std::uint8_t> staging(std::min(per, count) * stride);
  for (std::size_t r0 = 0; r0 < count; r0 += per) {
    const std::size_t k = std::min(per, count - r0);
    for (std::size_t r = 0; r < k; ++r) {
      std::uint8_t* row = staging.data() + r * stride;
      std::memcpy(row, rows + (r0 + r) * fs, fs);
      std::memset(row + fs, 0, stride - fs);
      std::memcpy(row + slot_offset_, &empty, 4);
    }
    backend_.copy_from_host(dst + r0 * stride, staging.data(), k * stride);
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::drop_rows(index_t first,
                                                                                   index_t count) {
  admit_pending();
  const index_t slots = cache_slots();
  if (slots == 0) return;
  if (const detail::StateRef st = state_ref(); st.active()) {  // keep the state of dirty rows
    backend_.for_each(slots, detail::KeepStateOfSlots<Rounding>{cache_ref(), st, first, count, step_ptr(),
                                                                &counters_.data()->stats.saturated_rows});
  }
  backend_.for_each(slots, detail::DropRows{cache_ref(), first, count});
}

}  // namespace mpe
