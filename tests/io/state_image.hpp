// SPDX-License-Identifier: Apache-2.0
// An owning host copy of a CachedEmbedding's TableState (CachedEmbedding::state()), for the
// tests that copy a table's state through the state interface (no file) and compare states
// part by part.
#pragma once

#include <cstdint>
#include <cstring>
#include <mpe/mpe.hpp>
#include <span>
#include <string>
#include <vector>

namespace ckt {

/// Every part of a TableState in host vectors (the store in state form).
struct StateImage {
  std::string storage, cache_policy, rounding, state_precision;
  std::int32_t ways = 0, dim = 0;
  std::vector<std::int64_t> table_rows;
  std::vector<std::uint8_t> store;
  std::size_t row_bytes = 0;
  std::vector<float> cache_rows;
  std::vector<std::int64_t> tags;
  std::vector<std::uint64_t> last_use;
  std::vector<std::uint8_t> dirty;
  std::vector<std::uint32_t> policy_words;
  std::string optimizer;
  std::uint32_t state_values_per_row = 0;
  std::vector<std::uint8_t> optimizer_state;
  std::vector<float> cached_optimizer_state;
  mpe::CacheStats stats{};
  std::uint64_t step = 0, decay_clock = 0, populate_counter = 0, calls = 0, seed = 0;
  std::vector<std::int64_t> pending_indices, pending_offsets;

  /// A copy of e.state() (backend memory read with the backend's copy_to_host; the store
  /// with read_store_rows()).
  template <class E>
  static StateImage of(const E& e) {
    const mpe::TableState s = e.state();
    StateImage m;
    m.storage = s.storage;
    m.cache_policy = s.cache_policy;
    m.rounding = s.rounding;
    m.state_precision = s.state_precision;
    m.ways = s.ways;
    m.dim = s.dim;
    m.table_rows.assign(s.table_rows.begin(), s.table_rows.end());
    e.read_store_rows(0, static_cast<std::size_t>(e.total_rows()), m.store);
    m.row_bytes = e.state_row_bytes();
    const auto get = [&](auto& dst, auto src) {
      dst.resize(src.size());
      if (!src.empty()) e.backend().copy_to_host(dst.data(), src.data(), src.size_bytes());
    };
    get(m.cache_rows, s.cache_rows);
    get(m.tags, s.tags);
    get(m.last_use, s.last_use);
    get(m.dirty, s.dirty);
    get(m.policy_words, s.policy_words);
    m.optimizer = s.optimizer;
    m.state_values_per_row = s.state_values_per_row;
    get(m.optimizer_state, s.optimizer_state);
    get(m.cached_optimizer_state, s.cached_optimizer_state);
    m.stats = s.stats;
    m.step = s.step;
    m.decay_clock = s.decay_clock;
    m.populate_counter = s.populate_counter;
    m.calls = s.calls;
    m.seed = s.seed;
    get(m.pending_indices, s.pending_indices);
    get(m.pending_offsets, s.pending_offsets);
    return m;
  }

  /// The image as restore_state() takes it (spans into this object).
  mpe::TableState view() const {
    mpe::TableState s;
    s.storage = storage;
    s.cache_policy = cache_policy;
    s.rounding = rounding;
    s.state_precision = state_precision;
    s.ways = ways;
    s.dim = dim;
    s.table_rows = table_rows;
    s.store = store;
    s.store_stride = row_bytes;
    s.cache_rows = cache_rows;
    s.tags = tags;
    s.last_use = last_use;
    s.dirty = dirty;
    s.policy_words = policy_words;
    s.optimizer = optimizer;
    s.state_values_per_row = state_values_per_row;
    s.optimizer_state = optimizer_state;
    s.cached_optimizer_state = cached_optimizer_state;
    s.stats = stats;
    s.step = step;
    s.decay_clock = decay_clock;
    s.populate_counter = populate_counter;
    s.calls = calls;
    s.seed = seed;
    s.pending_indices = pending_indices;
    s.pending_offsets = pending_offsets;
    return s;
  }

  /// Every part, each with its size, as bytes: equal for equal images only.
  std::vector<std::uint8_t> bytes() const {
    std::vector<std::uint8_t> b;
    const auto raw = [&](const void* p, std::size_t n) {
      const auto size = static_cast<std::uint64_t>(n);
      const auto* s = reinterpret_cast<const std::uint8_t*>(&size);
      b.insert(b.end(), s, s + 8);
      if (n > 0)
        b.insert(b.end(), static_cast<const std::uint8_t*>(p), static_cast<const std::uint8_t*>(p) + n);
    };
    const auto part = [&](const auto& v) { raw(v.data(), v.size() * sizeof(v[0])); };
    part(store);
    raw(&row_bytes, sizeof row_bytes);
    part(cache_rows);
    part(tags);
    part(last_use);
    part(dirty);
    part(policy_words);
    raw(optimizer.data(), optimizer.size());
    raw(&state_values_per_row, sizeof state_values_per_row);
    part(optimizer_state);
    part(cached_optimizer_state);
    raw(&stats, sizeof stats);
    for (const std::uint64_t x : {step, decay_clock, populate_counter, calls, seed}) raw(&x, sizeof x);
    part(pending_indices);
    part(pending_offsets);
    return b;
  }
};

}  // namespace ckt
