// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/setup.inl
/// @brief CachedEmbedding: construction (buffers, cache geometry), the cache view, counters and
/// memory() (included by mpe/embedding/cached_embedding.hpp).
#pragma once

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <string>

#include "mpe/detail/kernels/all.hpp"

namespace mpe {

namespace detail {
inline std::string ce_prefix(const char* fn) { return std::string("mpe::CachedEmbedding::") + fn + ": "; }
[[noreturn]] inline void invalid(const char* fn, const std::string& what) {
  throw std::invalid_argument(ce_prefix(fn) + what);
}
/// What is wrong with config.row_keys / config.column_keys (EmbeddingConfig), or "" when
/// they are valid: each empty or one per table; a row key >= 0 leaving room for its table's
/// rows; a column key >= 0, a multiple of 4 (whole element groups) and at most 2^26 - dim.
/// Shared by CachedEmbedding's constructor and ShardedEmbedding's (which checks the global
/// config before any rank builds its local tables).
inline std::string stream_keys_error(const EmbeddingConfig& config) {
  const std::string T = std::to_string(config.table_rows.size());
  if (!config.row_keys.empty() && config.row_keys.size() != config.table_rows.size())
    return "config.row_keys.size() = " + std::to_string(config.row_keys.size()) + "; must be 0 or T = " + T;
  for (std::size_t t = 0; t < config.row_keys.size(); ++t) {
    if (config.row_keys[t] < 0 || config.row_keys[t] > INT64_MAX - config.table_rows[t])
      return "config.row_keys[" + std::to_string(t) + "] = " + std::to_string(config.row_keys[t]) +
             "; must be >= 0 and leave room for the table's " + std::to_string(config.table_rows[t]) +
             " rows";
  }
  if (!config.column_keys.empty() && config.column_keys.size() != config.table_rows.size())
    return "config.column_keys.size() = " + std::to_string(config.column_keys.size()) +
           "; must be 0 or T = " + T;
  const std::int64_t max_column = (std::int64_t{1} << 26) - config.dim;
  for (std::size_t t = 0; t < config.column_keys.size(); ++t) {
    const std::int64_t c = config.column_keys[t];
    if (c < 0 || c % 4 != 0 || c > max_column)
      return "config.column_keys[" + std::to_string(t) + "] = " + std::to_string(c) +
             "; must be >= 0, a multiple of 4 (whole element groups) and at most 2^26 - config.dim = " +
             std::to_string(max_column);
  }
  return "";
}
/// What is wrong with config.max_range_growth for a store of format Storage, or "" when it
/// is valid: finite and in [0, 1], and nonzero only where the store has an affine per-row
/// grid (detail::RowGrid: Int8Rowwise, Int4Rowwise, Int2Rowwise). The value is written as
/// the shortest decimal that reads back as it. Shared by CachedEmbedding's constructor and
/// ShardedEmbedding's (before any rank builds its local tables).
template <class Storage>
std::string range_growth_error(const EmbeddingConfig& config) {
  const float g = config.max_range_growth;
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, g).ptr;
  const std::string v(buf, end);
  if (!(g >= 0.0f && g <= 1.0f))  // NaN fails both
    return "config.max_range_growth = " + v + "; must be finite and in [0, 1]";
  if (g > 0.0f && !RowGrid<Storage>::affine)
    return "config.max_range_growth = " + v +
           " needs a store with an affine per-row grid (int8_rowwise, int4_rowwise, int2_rowwise); this "
           "store is " +
           Storage::name;
  return "";
}
}  // namespace detail

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
detail::EmbeddingLayout CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::layout_of(
    const EmbeddingConfig& config, const char* fn) {
  detail::EmbeddingLayout L;
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
  L.table_offsets.assign(1, 0);
  for (std::size_t t = 0; t < config.table_rows.size(); ++t) {
    const auto r = config.table_rows[t];
    if (r < 1) {
      detail::invalid(
          fn, "config.table_rows[" + std::to_string(t) + "] = " + std::to_string(r) + "; must be >= 1");
    }
    if (r > INT64_MAX / 2 - L.table_offsets.back()) {
      detail::invalid(fn, "config.table_rows[" + std::to_string(t) + "] = " + std::to_string(r) +
                              " brings the total rows over INT64_MAX / 2 = " + std::to_string(INT64_MAX / 2) +
                              " (rows of the tables before it: " + std::to_string(L.table_offsets.back()) +
                              ")");
    }
    L.table_offsets.push_back(L.table_offsets.back() + r);
  }
  L.total_rows = L.table_offsets.back();
  if (const std::string e = detail::stream_keys_error(config); !e.empty()) detail::invalid(fn, e);
  if (const std::string e = detail::range_growth_error<Storage>(config); !e.empty()) detail::invalid(fn, e);
  L.row_keys = config.row_keys.size();
  // Column keys all 0 are the default: no array (the same bits without the table search).
  if (std::any_of(config.column_keys.begin(), config.column_keys.end(),
                  [](std::int64_t c) { return c != 0; }))
    L.column_keys = config.column_keys.size();
  L.stride = row_bytes<Storage>(config.dim, a);
  // The slot index in the store rows: an int32 entry after each row's data, 4-byte aligned.
  if (config.cache_rows > 0 && config.slot_index && config.slot_index_in_rows) {
    const std::size_t a4 = a < 4 ? 4 : static_cast<std::size_t>(a);
    L.slot_offset = (Storage::data_bytes(config.dim) + 3) / 4 * 4;
    L.stride = (L.slot_offset + 4 + a4 - 1) / a4 * a4;
  }
  // At most PTRDIFF_MAX bytes: a size near SIZE_MAX would wrap to a small allocation when
  // an allocator rounds it up (to huge pages, to its alignment).
  if (static_cast<unsigned long long>(L.total_rows) >
      static_cast<unsigned long long>(PTRDIFF_MAX) / L.stride) {
    detail::invalid(fn, "the store of " + std::to_string(L.total_rows) + " rows x " +
                            std::to_string(L.stride) +
                            " bytes a row (config.dim = " + std::to_string(config.dim) +
                            ") exceeds PTRDIFF_MAX = " + std::to_string(PTRDIFF_MAX) + " bytes");
  }
  if (config.cache_rows > 0) {
    const index_t W = Cache::ways;
    const index_t rounded_rows = (L.total_rows + W - 1) / W * W;
    const index_t C = std::min<index_t>(config.cache_rows, rounded_rows);
    L.num_sets = C / W;
    if (L.num_sets >= (index_t{1} << 32)) detail::invalid(fn, "config.cache_rows gives 2^32 or more sets");
    L.slots = static_cast<std::size_t>(L.num_sets * W);
    if (config.slot_index) {
      if (L.slots > static_cast<std::size_t>(INT32_MAX))
        detail::invalid(fn, "config.slot_index needs fewer than 2^31 cache slots; config.cache_rows gives " +
                                std::to_string(L.slots));
      if (L.slot_offset == 0) L.slot_index_entries = static_cast<std::size_t>(L.total_rows);
    }
    L.meta_words = static_cast<std::size_t>(Cache::meta_words(static_cast<index_t>(L.slots)));
  }
  return L;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::CachedEmbedding(
    const EmbeddingConfig& config, Backend backend)
    : config_(config), backend_(std::move(backend)) {
  detail::EmbeddingLayout L = layout_of(config, "CachedEmbedding");
  total_rows_ = L.total_rows;
  stride_ = L.stride;
  slot_offset_ = L.slot_offset;
  num_sets_ = L.num_sets;
  table_offsets_host_ = std::move(L.table_offsets);

  for (auto* b : {&current_, &pending_, &staging_}) {
    b->set_backend(backend_);
    b->flags.reset(detail::kNumFlags);
  }
  table_offsets_.set_backend(backend_);
  row_keys_.set_backend(backend_);
  column_keys_.set_backend(backend_);
  store_.set_backend(backend_);
  cache_rows_.set_backend(backend_);
  tags_.set_backend(backend_);
  slot_index_.set_backend(backend_);
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
  row_keys_.set_purpose(MemoryPurpose::Metadata);
  column_keys_.set_purpose(MemoryPurpose::Metadata);
  counters_.set_purpose(MemoryPurpose::Metadata);
  store_.set_purpose(MemoryPurpose::Store);
  cache_rows_.set_purpose(MemoryPurpose::Cache);
  tags_.set_purpose(MemoryPurpose::Cache);
  slot_index_.set_purpose(MemoryPurpose::Cache);
  last_use_.set_purpose(MemoryPurpose::Cache);
  dirty_.set_purpose(MemoryPurpose::Cache);
  meta_.set_purpose(MemoryPurpose::Cache);
  opt_state_.set_purpose(MemoryPurpose::Optimizer);
  cache_state_.set_purpose(MemoryPurpose::Optimizer);

  table_offsets_.reset(table_offsets_host_.size());
  backend_.copy_from_host(table_offsets_.data(), table_offsets_host_.data(), table_offsets_.bytes());
  if (L.row_keys > 0) {
    row_keys_.reset(L.row_keys);
    backend_.copy_from_host(row_keys_.data(), config.row_keys.data(), row_keys_.bytes());
  }
  if (L.column_keys > 0) {
    column_keys_.reset(L.column_keys);
    backend_.copy_from_host(column_keys_.data(), config.column_keys.data(), column_keys_.bytes());
  }
  store_.reset(L.store_bytes());
  // All-zero bytes decode to 0.0 in every format (Int8/Int4: scale 0, bias 0).
  backend_.fill_bytes(store_.data(), 0, store_.bytes());
  error_.reset(1);
  counters_.reset(1);
  backend_.fill_bytes(counters_.data(), 0, counters_.bytes());
  record_.reset(1);
  deferred_.reset(1);
  backend_.fill_bytes(deferred_.data(), 0xff, deferred_.bytes());  // check = -1: none
  backend_.for_each(1, detail::SetIndex{&deferred_.data()->later, 0});

  if (L.slots > 0) {
    cache_rows_.reset(L.slots * static_cast<std::size_t>(config.dim));
    backend_.fill_bytes(cache_rows_.data(), 0, cache_rows_.bytes());
    tags_.reset(L.slots);
    backend_.fill_bytes(tags_.data(), 0xff, tags_.bytes());  // -1: empty
    if (config.slot_index) {
      if (L.slot_index_entries > 0) slot_index_.reset(L.slot_index_entries);
      reindex_slots();  // every row -1: nothing is cached yet
    }
    last_use_.reset(L.slots);
    backend_.fill_bytes(last_use_.data(), 0, last_use_.bytes());
    dirty_.reset(L.slots);
    backend_.fill_bytes(dirty_.data(), 0, dirty_.bytes());
    flush_outcome_.reset(L.slots);
    meta_.reset(L.meta_words);
    backend_.fill_bytes(meta_.data(), 0, meta_.bytes());
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
MemoryFootprint CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::planned_memory(
    const EmbeddingConfig& config, std::int64_t state_values_per_row) {
  const char* fn = "planned_memory";
  const detail::EmbeddingLayout L = layout_of(config, fn);
  const std::int64_t S = state_values_per_row;
  if (S < 0) detail::invalid(fn, "state_values_per_row = " + std::to_string(S) + "; must be >= 0");
  // The state store as the first applied backward() allocates it, at most PTRDIFF_MAX bytes.
  const auto limit = static_cast<unsigned long long>(PTRDIFF_MAX);
  if (S > 0 && static_cast<unsigned long long>(S) >
                   limit / StatePrecision::value_bytes / static_cast<unsigned long long>(L.total_rows)) {
    detail::invalid(fn, "state_values_per_row = " + std::to_string(S) + " over " +
                            std::to_string(L.total_rows) +
                            " rows exceeds PTRDIFF_MAX = " + std::to_string(PTRDIFF_MAX) + " bytes of state");
  }
  // Each buffer memory() sums: the layout's element count x the buffer's element size.
  auto of = [](std::size_t n, std::size_t element_bytes) { return n * element_bytes; };
  MemoryFootprint m;
  m.store_bytes = of(L.store_bytes(), sizeof(typename decltype(store_)::value_type));
  m.cache_bytes =
      of(L.slots * static_cast<std::size_t>(config.dim), sizeof(typename decltype(cache_rows_)::value_type)) +
      of(L.slots, sizeof(typename decltype(tags_)::value_type)) +
      of(L.slot_index_entries, sizeof(typename decltype(slot_index_)::value_type)) +
      of(L.slots, sizeof(typename decltype(last_use_)::value_type)) +
      of(L.slots, sizeof(typename decltype(dirty_)::value_type)) +
      of(L.meta_words, sizeof(typename decltype(meta_)::value_type));
  if (S > 0) {  // allocated by the first applied backward() (apply_backward)
    m.optimizer_bytes = L.state_bytes(L.total_rows, S, StatePrecision::value_bytes) +
                        of(L.cached_state_floats(L.slots, S, StatePrecision::cached),
                           sizeof(typename decltype(cache_state_)::value_type));
  }
  m.metadata_bytes = of(L.table_offsets.size(), sizeof(typename decltype(table_offsets_)::value_type)) +
                     of(L.row_keys, sizeof(typename decltype(row_keys_)::value_type)) +
                     of(L.column_keys, sizeof(typename decltype(column_keys_)::value_type)) +
                     sizeof(typename decltype(counters_)::value_type);
  return m;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
CacheRef CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::cache_ref() const {
  CacheRef c;
  c.rows = const_cast<float*>(cache_rows_.data());
  c.tags = const_cast<index_t*>(tags_.data());
  c.last_use = const_cast<std::uint64_t*>(last_use_.data());
  c.dirty = const_cast<std::uint8_t*>(dirty_.data());
  c.num_sets = num_sets_;
  c.ways = Cache::ways;
  c.dim = config_.dim;
  c.slot_of_row = slot_index_.size() > 0 ? const_cast<std::int32_t*>(slot_index_.data()) : nullptr;
  if (slot_offset_ > 0 && num_sets_ > 0) {
    c.slot_of_row = reinterpret_cast<std::int32_t*>(const_cast<std::uint8_t*>(store_.data()) + slot_offset_);
    c.slot_stride = static_cast<std::int64_t>(stride_ / 4);
  }
  return c;
}

// Every row -1, then each tagged slot's row its slot: after tags_ is replaced wholesale
// (construction, load()). Nothing without a slot index.
template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::reindex_slots() {
  if (slot_offset_ > 0) {  // the entries in the store rows
    if (num_sets_ == 0) return;
    backend_.for_each(total_rows_, detail::ClearSlotEntry{cache_ref()});
    backend_.for_each(cache_slots(), detail::IndexSlot{cache_ref()});
    return;
  }
  if (slot_index_.size() == 0) return;
  backend_.fill_bytes(slot_index_.data(), 0xff, slot_index_.bytes());
  backend_.for_each(cache_slots(), detail::IndexSlot{cache_ref()});
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
std::int64_t CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::state_floats() const {
  return opt_state_.size() / (static_cast<std::size_t>(total_rows_) * StatePrecision::value_bytes);
}

// The compact state view: inactive with StateFp32 (its FP32 array is addressed directly)
// and before the first applied step.
template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
detail::StateRef CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::state_ref() const {
  if constexpr (!StatePrecision::cached) {
    return {};
  } else {
    if (opt_state_.size() == 0) return {};
    return detail::StateRef{const_cast<std::uint8_t*>(opt_state_.data()),
                            num_sets_ > 0 ? const_cast<float*>(cache_state_.data()) : nullptr, state_floats(),
                            StatePrecision::format, row_stream()};
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
index_t CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::read_scalar(
    const index_t* p) const {
  index_t v;
  backend_.copy_to_host(&v, p, sizeof v);
  return v;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
detail::Counters CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::read_counters() const {
  detail::Counters c;
  backend_.copy_to_host(&c, counters_.data(), sizeof c);
  return c;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::reset_stats() {
  admit_pending();  // counted before the reset, as its forward() would have been
  backend_.fill_bytes(&counters_.data()->stats, 0, sizeof(CacheStats));
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
MemoryFootprint CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::memory() const {
  MemoryFootprint m;
  m.store_bytes = store_.bytes();
  m.cache_bytes = cache_rows_.bytes() + tags_.bytes() + slot_index_.bytes() + last_use_.bytes() +
                  dirty_.bytes() + meta_.bytes();
  m.optimizer_bytes = opt_state_.bytes() + cache_state_.bytes();
  m.metadata_bytes = table_offsets_.bytes() + row_keys_.bytes() + column_keys_.bytes() + counters_.bytes();
  m.workspace_bytes = current_.bytes() + pending_.bytes() + staging_.bytes() + error_.bytes() +
                      flush_outcome_.bytes() + record_.bytes() + deferred_.bytes();
  return m;
}

}  // namespace mpe
