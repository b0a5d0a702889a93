// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/statistics.hpp
/// @brief Outcome bits of populate/backward/flush and the functors that fold them into the
/// integer counters of CacheStats (exact in any order).
/// Per-item functors of CachedEmbedding (not public): trivially copyable,
/// `MPE_HOST_DEVICE`, run by HostBackend through Thrust and launched as kernels by
/// CudaBackend; each writes disjoint outputs per item.
#pragma once

#include <cstdint>

#include "mpe/core/types.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe::detail {

/// Outcome bits of one unique row in populate / backward.
enum Outcome : std::uint8_t {
  kHit = 1,
  kFilled = 2,
  kConflict = 4,
  kRejected = 8,
  kEvicted = 16,
  kWroteBack = 32,
  kSaturated = 64,
};

/// Integer tallies of outcome bits (summed exactly by the backend).
struct OutcomeCounts {
  std::uint64_t hits = 0, filled = 0, conflicts = 0, rejected = 0, evicted = 0, wrote_back = 0, saturated = 0;
  MPE_HOST_DEVICE OutcomeCounts operator+(const OutcomeCounts& o) const {
    return {hits + o.hits,       filled + o.filled,         conflicts + o.conflicts, rejected + o.rejected,
            evicted + o.evicted, wrote_back + o.wrote_back, saturated + o.saturated};
  }
};

struct CountOutcome {
  const std::uint8_t* outcome;
  const index_t* count;  // (1) number of valid items, or null: all
  const index_t* gate;   // or null
  MPE_HOST_DEVICE OutcomeCounts operator()(index_t i) const {
    if ((count && i >= *count) || !open(gate)) return {};
    const std::uint8_t c = outcome[i];
    return {
        static_cast<std::uint64_t>((c & kHit) != 0),      static_cast<std::uint64_t>((c & kFilled) != 0),
        static_cast<std::uint64_t>((c & kConflict) != 0), static_cast<std::uint64_t>((c & kRejected) != 0),
        static_cast<std::uint64_t>((c & kEvicted) != 0),  static_cast<std::uint64_t>((c & kWroteBack) != 0),
        static_cast<std::uint64_t>((c & kSaturated) != 0)};
  }
};

/// Counters of a CachedEmbedding that device work updates, in backend memory: the
/// statistics, the step, the cache policy's decay clock and the scratch they are summed in.
struct Counters {
  CacheStats stats;
  std::uint64_t step;         ///< completed backward() calls (Philox counter word)
  std::uint64_t decay_clock;  ///< unique rows since the policy's last decay (policies that decay)
  std::uint64_t decays_due;   ///< decays due after this populate
  std::uint64_t lock_floor;   ///< the running populate's lock floor (SetLockFloor)
  OutcomeCounts tally;        ///< last reduce_to result
};

/// Which call's tally FoldCounts adds to the statistics.
enum class Fold : std::int32_t { Populate, Backward, Flush };

/// Single item: adds the tally (and for populate the lookups and unique rows) to the
/// statistics; backward also advances the step. Nothing when the gate is closed.
struct FoldCounts {
  Counters* c;
  Fold kind;
  index_t n;                // populate: occurrences
  const index_t* unique;    // populate: (1) U, or null without a cache
  std::uint64_t row_bytes;  // Storage::data_bytes(D)
  const index_t* gate;      // or null
  MPE_HOST_DEVICE void operator()(index_t) const {
    if (!open(gate)) return;
    const OutcomeCounts t = c->tally;
    CacheStats& s = c->stats;
    if (kind == Fold::Populate) {
      s.lookups += static_cast<std::uint64_t>(n);
      if (!unique) return;
      const auto U = static_cast<std::uint64_t>(*unique);
      s.unique_rows += U;
      s.hits += t.hits;
      s.misses += U - t.hits;
      s.conflict_misses += t.conflicts;
      s.lfu_rejections += t.rejected;
      s.evictions += t.evicted;
    } else if (kind == Fold::Backward) {
      c->step += 1;
    }
    if (kind != Fold::Backward) {
      s.writebacks += t.wrote_back;
      s.bytes_written_back += t.wrote_back * row_bytes;
    }
    if (kind == Fold::Populate) s.bytes_filled += t.filled * row_bytes;
    s.saturated_rows += t.saturated;
  }
};

}  // namespace mpe::detail
