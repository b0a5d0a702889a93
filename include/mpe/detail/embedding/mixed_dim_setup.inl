// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/mixed_dim_setup.inl
/// @brief MixedDimEmbedding: construction, planned_memory, the table -> D-group layout and each
/// group's EmbeddingConfig, argument checks, and the split of a batch over the groups
/// (included by mpe/embedding/mixed_dim_embedding.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "mpe/detail/embedding/mixed_dim.hpp"

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::MixedDimEmbedding(
    const MixedDimConfig& config, Backend backend)
    : config_(config), layout_(make_layout(config, "MixedDimEmbedding")), backend_(backend) {
  groups_.reserve(layout_.G());
  for (std::size_t g = 0; g < layout_.G(); ++g) groups_.emplace_back(group_config(g), backend_);
  batches_.reserve(layout_.G());
  for (std::size_t g = 0; g < layout_.G(); ++g) batches_.push_back(new_batch());
  scratch_ = new_scratch();
  if constexpr (Backend::device_spans) {
    if (layout_.G() > 1) upload_layout();
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline detail::MixedLayout MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::make_layout(
    const MixedDimConfig& config, const char* fn) {
  if (config.tables.empty()) invalid(fn, "config.tables is empty; need T >= 1 tables");
  if (!(config.cache_fraction >= 0.0 && config.cache_fraction <= 1.0)) {
    invalid(fn, "config.cache_fraction = " + std::to_string(config.cache_fraction) + "; must be in [0, 1]");
  }
  for (const auto& [name, keys] :
       {std::pair{"row_keys", &config.row_keys}, std::pair{"column_keys", &config.column_keys}}) {
    if (!keys->empty() && keys->size() != config.tables.size()) {
      invalid(fn, std::string("config.") + name + ".size() = " + std::to_string(keys->size()) +
                      "; must be 0 or T = " + std::to_string(config.tables.size()));
    }
  }
  for (std::size_t t = 0; t < config.row_keys.size(); ++t) {
    const std::int64_t k = config.row_keys[t], rows = t < config.tables.size() ? config.tables[t].rows : 0;
    if (k < 0 || (rows > 0 && k > INT64_MAX - rows)) {
      invalid(fn, "config.row_keys[" + std::to_string(t) + "] = " + std::to_string(k) +
                      "; must be >= 0 and leave room for the table's " + std::to_string(rows) + " rows");
    }
  }
  for (std::size_t t = 0; t < config.column_keys.size(); ++t) {
    const std::int64_t c = config.column_keys[t], dim = config.tables[t].dim;
    if (c < 0 || c % 4 != 0 || c > (std::int64_t{1} << 26) - dim) {
      invalid(fn, "config.column_keys[" + std::to_string(t) + "] = " + std::to_string(c) +
                      "; must be >= 0, a multiple of 4 (whole element groups) and at most 2^26 - D = " +
                      std::to_string((std::int64_t{1} << 26) - dim));
    }
  }
  {  // Named here, not by the first group's CachedEmbedding (same rule: range_growth_error).
    EmbeddingConfig growth;
    growth.max_range_growth = config.max_range_growth;
    if (const std::string e = detail::range_growth_error<Storage>(growth); !e.empty()) invalid(fn, e);
  }
  detail::MixedLayout L;
  for (std::size_t t = 0; t < config.tables.size(); ++t) {
    const TableSpec& s = config.tables[t];
    if (s.rows < 1 || s.dim < 1 || s.dim > (1 << 20)) {
      invalid(fn, "config.tables[" + std::to_string(t) + "] = {rows " + std::to_string(s.rows) + ", dim " +
                      std::to_string(s.dim) + "}; rows must be >= 1 and dim in [1, 2^20]");
    }
    L.rows.push_back(s.rows);
    L.dims.push_back(s.dim);
    L.column.push_back(L.total_dim);
    L.total_dim += s.dim;
    std::size_t g = 0;
    while (g < L.G() && L.group_dim[g] != s.dim) ++g;
    if (g == L.G()) {
      L.group_dim.push_back(s.dim);
      L.group_tables.emplace_back();
    }
    L.group_of.push_back(static_cast<std::int64_t>(g));
    L.local.push_back(static_cast<std::int64_t>(L.group_tables[g].size()));
    L.group_tables[g].push_back(static_cast<std::int64_t>(t));
  }
  return L;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline EmbeddingConfig MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::group_config(
    const MixedDimConfig& config, const detail::MixedLayout& layout, std::size_t g) {
  EmbeddingConfig c;
  std::int64_t rows = 0;
  for (std::int64_t t : layout.group_tables[g]) {
    c.table_rows.push_back(layout.rows[static_cast<std::size_t>(t)]);
    rows += layout.rows[static_cast<std::size_t>(t)];
  }
  c.dim = layout.group_dim[g];
  c.cache_rows = config.cache_fraction > 0
                     ? std::max<std::int64_t>(Cache::ways,
                                              std::llround(config.cache_fraction * static_cast<double>(rows)))
                     : 0;
  // Row keys: the caller keys every row, so one seed for every group (class comment).
  c.seed = g == 0 || !config.row_keys.empty()
               ? config.seed
               : config.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(g));
  for (std::int64_t t : layout.group_tables[g]) {
    if (!config.row_keys.empty()) c.row_keys.push_back(config.row_keys[static_cast<std::size_t>(t)]);
    if (!config.column_keys.empty()) c.column_keys.push_back(config.column_keys[static_cast<std::size_t>(t)]);
  }
  c.row_alignment = config.row_alignment;
  c.non_finite = config.non_finite;
  c.slot_index = config.slot_index;
  c.slot_index_in_rows = config.slot_index_in_rows;
  c.defer_admission = config.defer_admission;
  c.max_range_growth = config.max_range_growth;
  c.validation = Validation::Synchronous;
  return c;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline std::size_t MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::table_index(
    const char* fn, std::int64_t t) const {
  if (t < 0 || t >= layout_.T()) {
    invalid(fn, "table t = " + std::to_string(t) + " is outside [0, T) = [0, " + std::to_string(layout_.T()) +
                    ")");
  }
  return static_cast<std::size_t>(t);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::check_table(
    const char* fn, std::int64_t t, std::int64_t first_row, std::size_t n) const {
  const std::size_t i = table_index(fn, t);
  const auto D = static_cast<std::size_t>(layout_.dims[i]);
  if (n % D != 0) {
    invalid(fn, "size " + std::to_string(n) + " is not a multiple of table " + std::to_string(t) +
                    "'s D = " + std::to_string(D));
  }
  const auto rows = static_cast<std::int64_t>(n / D);
  if (first_row < 0 || first_row > layout_.rows[i] - rows) {
    invalid(fn, "rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + rows) +
                    ") leave table " + std::to_string(t) + " (" + std::to_string(layout_.rows[i]) + " rows)");
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline std::int64_t MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::check(
    const char* fn, std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
    std::size_t output_size, Pooling pooling, std::span<const float> w, bool training,
    scratch_type& s) const {
  if (pooling != Pooling::Sum && pooling != Pooling::Mean) {
    invalid(fn, "pooling = " + std::to_string(static_cast<int>(pooling)) + " is not a Pooling value");
  }
  if (pooling == Pooling::Mean && !w.empty()) {
    invalid(fn, "per_sample_weights need Pooling::Sum (got Pooling::Mean with " + std::to_string(w.size()) +
                    " weights)");
  }
  // One group: its own checks (atomic, in the caller's numbering) run in its call; no
  // second pass over the batch. B as the group will find it (offsets' size checked there).
  if (groups_.size() == 1)
    return offsets.empty() ? 0 : static_cast<std::int64_t>(offsets.size() - 1) / layout_.T();
  const std::int64_t B =
      check_batch(fn, indices, offsets, w, !training || config_.non_finite == NonFinite::Throw, s);
  if (output_size != static_cast<std::size_t>(B * layout_.total_dim)) {
    invalid(fn, "output.size() = " + std::to_string(output_size) +
                    "; expected B*sum(D) = " + std::to_string(B) + "*" + std::to_string(layout_.total_dim) +
                    " = " + std::to_string(B * layout_.total_dim));
  }
  return B;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
template <class Run>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::each_group(
    std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<float> output,
    std::span<const float> w, std::int64_t B, const scratch_type& s, batch_type* bufs, std::size_t buf_step,
    Run&& run) const {
  if (groups_.size() == 1) {
    run(0, indices, offsets, output, w);
    return;
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    batch_type& b = bufs[g * buf_step];
    split(g, indices, offsets, w, B, s, b);
    run(g, b.idx(), b.offs(), b.sized_buf(group_elements(g, B)), b.wts());
    scatter(g, b, output, B);
  }
}

}  // namespace mpe
