// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/state_ref.hpp
/// @brief (Not public.) `StateRef`: the view of a table's compact optimizer state (BF16 or
/// FP16 store plus the FP32 state of cached rows) that the per-item functors use to move a
/// row's state with the row; and the functors that write back the state of dirty cache
/// lines before they are dropped. Layout and rounding: mpe/optim/state_precision.hpp.
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/core/types.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/optim/state_precision.hpp"

namespace mpe::detail {

/// Compact optimizer state in backend memory. Trivially copyable. A default (all null)
/// view is inactive and every member does nothing: so it is with StateFp32 (whose FP32
/// array the functors address directly, as before state precisions) and before the first
/// applied step allocates the state.
struct StateRef {
  std::uint8_t* store = nullptr;  ///< (rows, S) values of `format`, or null (inactive)
  float* cache = nullptr;         ///< (slots, S) FP32 state of cached rows, or null (no cache)
  std::int64_t S = 0;             ///< state values per row
  StateFormat format = StateFormat::Fp32;
  num::RowStream stream{};  ///< the table's rounding streams (seed, row keys; column keys unused)

  MPE_HOST_DEVICE bool active() const { return store != nullptr; }
  MPE_HOST_DEVICE std::size_t value_bytes() const { return format == StateFormat::Fp32 ? 4 : 2; }
  MPE_HOST_DEVICE std::uint8_t* row(index_t r) const {
    return store + static_cast<std::size_t>(r) * static_cast<std::size_t>(S) * value_bytes();
  }
  MPE_HOST_DEVICE float* slot(index_t s) const { return cache + s * S; }
  /// Decodes row r's stored state into out (S floats).
  MPE_HOST_DEVICE void decode(index_t r, float* out) const {
    const std::uint8_t* p = row(r);
    for (std::int64_t k = 0; k < S; ++k) out[k] = num::decode_state(format, p, k);
  }
  /// Rounds `in` (S floats) into row r's stored state (policy R, stream of `site` at step t).
  /// True when a value saturated to the format's largest finite value.
  template <class R>
  MPE_HOST_DEVICE bool encode(index_t r, const float* in, std::uint32_t t, num::RoundingSite site) const {
    num::RowRng rng = stream.at(r, t, site);
    rng.group_base = 0;  // the state's element groups count its S values: no column key
    return num::encode_state<R>(format, in, S, row(r), rng);
  }
  /// Row r's current state into out (S floats): from cache slot s (>= 0, holding r) or the store.
  MPE_HOST_DEVICE void read(index_t r, index_t s, float* out) const {
    if (s >= 0 && cache) {
      const float* c = slot(s);
      for (std::int64_t k = 0; k < S; ++k) out[k] = c[k];
    } else {
      decode(r, out);
    }
  }
  /// Stores row r's new state `in` (S floats): into cache slot s (>= 0, holding r) exactly,
  /// else rounded into the store (site StateUpdate at completed step t). True when a
  /// rounded value saturated (never for the cache slot, which holds FP32).
  template <class R>
  MPE_HOST_DEVICE bool write(index_t r, index_t s, const float* in, std::uint32_t t) const {
    if (s >= 0 && cache) {
      float* c = slot(s);
      for (std::int64_t k = 0; k < S; ++k) c[k] = in[k];
      return false;
    }
    return encode<R>(r, in, t, num::RoundingSite::StateUpdate);
  }
  /// Cache fill of row r into slot s: its stored state decoded into the slot.
  MPE_HOST_DEVICE void fill(index_t s, index_t r) const {
    if (active() && cache) decode(r, slot(s));
  }
  /// Write-back of slot s (holding row r): its FP32 state rounded into the store. True
  /// when a value saturated.
  template <class R>
  MPE_HOST_DEVICE bool write_back(index_t s, index_t r, std::uint32_t t, num::RoundingSite site) const {
    return active() && cache && encode<R>(r, slot(s), t, site);
  }
};

/// Before WriteRows drops the lines of global rows [first, first + count): the state of
/// each such row that is cached and dirty is written back (site StateDrop), so that
/// replacing a row's weights keeps its optimizer state; a row whose state saturated counts
/// in stats().saturated_rows (an integer atomic: the same total in any order).
template <class Rounding>
struct KeepStateOfRows {
  CacheRef cache;
  StateRef state;
  index_t first;
  const std::uint64_t* step;  // (1) completed backward() calls
  std::uint64_t* saturated;   // (1) Counters::stats.saturated_rows
  MPE_HOST_DEVICE void operator()(index_t i) const {
    const index_t r = first + i;
    const index_t s = cache.find(r);
    if (s >= 0 && cache.dirty[s] &&
        state.template write_back<Rounding>(s, r, static_cast<std::uint32_t>(*step),
                                            num::RoundingSite::StateDrop))
      atomic_add(saturated, std::uint64_t{1});
  }
};

/// Before DropRows drops the lines of slots holding rows in [first, first + count): the
/// state of each dirty one is written back (site StateDrop).
template <class Rounding>
struct KeepStateOfSlots {
  CacheRef cache;
  StateRef state;
  index_t first, count;
  const std::uint64_t* step;  // (1) completed backward() calls
  std::uint64_t* saturated;   // (1) Counters::stats.saturated_rows: + 1 per row whose state saturated
  MPE_HOST_DEVICE void operator()(index_t s) const {
    const index_t r = cache.tags[s];
    if (r >= first && r < first + count && cache.dirty[s] &&
        state.template write_back<Rounding>(s, r, static_cast<std::uint32_t>(*step),
                                            num::RoundingSite::StateDrop))
      atomic_add(saturated, std::uint64_t{1});
  }
};

}  // namespace mpe::detail
