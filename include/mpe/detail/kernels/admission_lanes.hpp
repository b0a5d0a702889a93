// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/admission_lanes.hpp
/// @brief The set admission on laned backends (not public): a GPU's hits (every item's
/// lookup, lanes across the ways), misses (a warp per set), dirty write-backs and fills (a
/// warp per row), with the slots and bits of AdmitSet (admission.hpp). `MPE_HOST_DEVICE`.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policy.hpp"
#include "mpe/detail/kernels/admission.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/detail/kernels/state_ref.hpp"
#include "mpe/detail/kernels/warp.hpp"

namespace mpe::detail {

/// True when P declares `hits_commute = true` (Lru, Lfu, DirectMapped): its on_hit writes
/// only the hit slot's own metadata, so a set's hits may run in any order, concurrently
/// (AdmitHitsLanes). Other policies' hits run in admission order, one thread per set.
template <class P>
inline constexpr bool hits_commute = [] {
  if constexpr (requires { P::hits_commute; }) {
    return static_cast<bool>(P::hits_commute);
  } else {
    return false;
  }
}();

/// Laned backends, a hits_commute policy: AdmitPhase::Hits for item q (admission order),
/// the set's ways split over the lanes. The lane holding the row's tag (a row is in at most
/// one way) records the hit: slot, outcome kHit, last use = the batch number, on_hit.
/// slot_of_unique (-1) and outcome (0) are filled before the launch, so a miss writes
/// nothing. Does nothing when the batch failed validation.
template <class P>
struct AdmitHitsLanes {
  const std::uint64_t* keys;  // (U) sorted admission keys (set << 32 | ...)
  const index_t* order;       // (U) unique index of each item
  const index_t* rows;        // (U) row of each item
  const index_t* count;       // (1) U
  const index_t* gate;        // batch ok flag, or null
  CacheRef cache;
  typename P::View view;
  std::uint64_t batch_id;
  index_t* slot_of_unique;  // (U) -1 on entry
  std::uint8_t* outcome;    // (U) 0 on entry
  MPE_HOST_DEVICE void operator()(index_t q, std::int32_t lane, std::int32_t lanes) const {
    if (q >= *count || !open(gate)) return;
    const index_t base = static_cast<index_t>(keys[q] >> 32) * cache.ways;
    const index_t row = rows[q];
    for (std::int32_t w = lane; w < cache.ways; w += lanes) {
      MPE_TRIP();
      if (cache.tags[base + w] != row) continue;
      const index_t s = base + w;
      const index_t u = order[q];
      slot_of_unique[u] = s;
      outcome[u] = kHit;
      cache.last_use[s] = batch_id;
      P::on_hit(view, cache, s);
    }
  }
};

/// Laned backends whose lanes are one warp (warp_lanes), a policy whose misses take their
/// slots from SetVictims (uses_scored_choose) with at most 32 ways: AdmitSet's deciding
/// Misses phase (`set.evicted` set: slots, tags, last uses, dirty flags, outcome codes and
/// evicted rows; WriteBackLanes and FillLanes then move the rows) with a warp per set
/// instead of a thread. Item c covers the admission-order items [c * lanes, (c + 1) * lanes)
/// and decides every set whose first item lies there. Lane w holds way w: one read of the
/// set's tags and last uses, a ballot for the empty ways and the unlocked occupied ones, and
/// each lane's place in SetVictims' order (the empty ways by way, then the unlocked ways by
/// (score, way)) from a comparison with every other lane's score. The set's items are then
/// read 32 at a time and its misses, in admission order, take places 0, 1, 2, ... of that
/// order (a place among the unlocked ways only if P::admits the miss at that way's score; a
/// refused miss takes none; none left: a conflict), the lane of the way taken writing the
/// slot's metadata: the same slots, codes and bits as SetVictims in one thread per set.
/// Where lanes run one after another (no warp), lane 0 runs AdmitSet's misses for each such
/// set instead. The warp code is written against WarpOps (CudaWarp on a GPU), so
/// tests/cache/test_admit_misses_lanes.cpp runs it on a CPU with an emulated warp against
/// AdmitSet, decision by decision.
template <class Storage, class Rounding, class P, class Paths = PortablePaths>
struct AdmitMissesLanes {
  static_assert(P::ways <= 32, "mpe::detail::AdmitMissesLanes: a way per lane of one warp");
  AdmitSet<Storage, Rounding, P, Paths> set;  // phase Misses, evicted set
  MPE_HOST_DEVICE void operator()(index_t c, std::int32_t lane, std::int32_t lanes) const {
#ifdef __CUDA_ARCH__
    (void)lanes;  // 32
    chunk(CudaWarp{}, c, lane);
#else
    if (lane != 0) return;
    for (index_t p = c * lanes; p < (c + 1) * lanes; ++p) set(p);  // the heads run their sets
#endif
  }

  /// Item c by a warp (WarpOps: CudaWarp, or the tests' emulation; every lane calls): the
  /// sets whose first item lies in [32 c, 32 c + 32), one after another.
  template <class Warp>
  MPE_HOST_DEVICE void chunk(const Warp& warp, index_t c, std::int32_t lane) const {
    const index_t U = *set.count;
    const index_t p0 = c * 32;
    if (p0 >= U || !open(set.gate)) return;  // the same for every lane
    const index_t p = p0 + lane;
    const bool head = p < U && set.is_head(p);
    for (unsigned heads = warp.ballot(head); heads != 0u; heads &= heads - 1u) {
      decide(warp, p0 + lowest_lane(heads), U, lane);
    }
  }

  /// The set whose items start at p, decided by the warp (see the struct comment).
  template <class Warp>
  MPE_HOST_DEVICE void decide(const Warp& warp, index_t p, index_t U, std::int32_t lane) const {
    const CacheRef& cache = set.cache;
    const std::uint64_t key_set = set.keys[p] >> 32;
    index_t end = p + 1;  // one past the set's last item: 32 keys per step
    for (;; end += 32) {
      const index_t q = end + lane;
      const unsigned out = warp.ballot(q >= U || (set.keys[q] >> 32) != key_set);
      if (out != 0u) {
        end += lowest_lane(out);
        break;
      }
    }
    const index_t base = static_cast<index_t>(key_set) * cache.ways;
    const std::uint64_t floor = *set.lock_floor;
    const bool way = lane < cache.ways;
    const index_t s = base + lane;
    const index_t tag = way ? cache.tags[s] : -1;
    const bool empty = way && tag < 0;
    const bool unlocked = way && tag >= 0 && cache.last_use[s] < floor;
    const std::uint64_t score = unlocked ? P::score(set.view, cache, s) : 0;
    const unsigned empties = warp.ballot(empty), open_ways = warp.ballot(unlocked);
    const std::int32_t n_empty = lane_count(empties), places = n_empty + lane_count(open_ways);
    std::int32_t place = -1;  // this way's place in SetVictims' order; -1: never handed out
    if (empty) place = lane_count(empties & ((1u << lane) - 1u));
    std::int32_t below = 0;  // unlocked ways before this one: lower (score, way)
    for (std::int32_t j = 0; j < 32; ++j) {
      const std::uint64_t sj = warp.shfl(score, j);
      below += ((open_ways >> j) & 1u) != 0u && (sj < score || (sj == score && j < lane)) ? 1 : 0;
    }
    if (unlocked) place = n_empty + below;
    std::int32_t next = 0;  // the next place to hand out
    for (index_t q0 = p; q0 < end; q0 += 32) {
      const index_t q = q0 + lane;
      index_t u = -1, row = -1;
      std::uint32_t priority = 0;
      bool miss = false;
      if (q < end) {
        u = set.order[q];
        miss = (set.outcome[u] & kHit) == 0;
        if (miss) {
          priority = set.priorities[u];
          row = set.rows[q];
        }
      }
      for (unsigned misses = warp.ballot(miss); misses != 0u; misses &= misses - 1u) {
        const std::int32_t i = lowest_lane(misses);
        const index_t ui = warp.shfl(u, i), ri = warp.shfl(row, i);
        const std::uint32_t pi = warp.shfl(priority, i);
        if (next == places) {  // every way locked or taken: a conflict miss
          if (lane == 0) set.outcome[ui] = kConflict;
          continue;
        }
        const std::int32_t at = lowest_lane(warp.ballot(place == next));
        const std::uint64_t at_score = warp.shfl(score, at);
        if (next >= n_empty && !P::admits(set.view, pi, at_score)) {
          if (lane == 0) set.outcome[ui] = kRejected;
          continue;
        }
        ++next;
        if (lane != at) continue;
        std::uint8_t code = kFilled;
        if (tag >= 0) {
          code |= kEvicted;
          if (cache.dirty[s]) {
            set.evicted[ui] = tag;
            code |= kWroteBack;
          }
        }
        cache.set_tag(s, ri);
        cache.last_use[s] = set.batch_id;
        cache.dirty[s] = 0;
        set.slot_of_unique[ui] = s;
        set.outcome[ui] = code;
      }
    }
  }
};

/// Laned backends, after AdmitSet's deciding Misses phase (AdmitSet::evicted): the dirty
/// victim of unique row u (outcome kWroteBack) written back to its store row with Rounding
/// at site WriteBack, each lane storing its element groups (detail::store_lanes; the same
/// bytes as Storage::store), and lane 0 its compact optimizer state. A lane that saturates
/// adds kSaturated to outcome[u] (every such write stores the same value).
template <class Storage, class Rounding>
struct WriteBackLanes {
  const index_t* slot_of_unique;  // (U)
  const index_t* evicted;         // (U) the victim's row, where kWroteBack
  std::uint8_t* outcome;          // (U)
  CacheRef cache;
  std::uint8_t* store;
  std::size_t stride;
  num::RowStream stream;      // the rounding streams (seed, row keys)
  const std::uint64_t* step;  // (1) completed backward() calls
  StateRef state;
  const index_t* count;  // (1) U
  const index_t* gate;   // batch ok flag, or null
  MPE_HOST_DEVICE void operator()(index_t u, std::int32_t lane, std::int32_t lanes) const {
    if (u >= *count || !open(gate) || !(outcome[u] & kWroteBack)) return;
    const index_t s = slot_of_unique[u], old = evicted[u];
    const num::RowRng rng = stream.at(old, static_cast<std::uint32_t>(*step), num::RoundingSite::WriteBack);
    bool sat = store_lanes<Storage, Rounding>(
        cache.row(s), cache.dim, store + static_cast<std::size_t>(old) * stride, rng, lane, lanes);
    if (lane == 0) {
      sat = state.template write_back<Rounding>(s, old, static_cast<std::uint32_t>(*step),
                                                num::RoundingSite::StateWriteBack) ||
            sat;
    }
    if (sat) outcome[u] = static_cast<std::uint8_t>(outcome[u] | kSaturated);
  }
};

/// Laned backends, after WriteBackLanes: unique row u's fill (outcome kFilled), its store
/// row decoded into its slot by lanes on element chunks (the Reader's values, as Paths::fill_row),
/// and lane 0 its compact optimizer state (StateRef::fill).
template <class Storage>
struct FillLanes {
  const index_t* uniq;            // (U)
  const index_t* slot_of_unique;  // (U)
  const std::uint8_t* outcome;    // (U)
  CacheRef cache;
  const std::uint8_t* store;
  std::size_t stride;
  StateRef state;
  const index_t* count;  // (1) U
  const index_t* gate;   // batch ok flag, or null
  MPE_HOST_DEVICE void operator()(index_t u, std::int32_t lane, std::int32_t lanes) const {
    if (u >= *count || !open(gate) || !(outcome[u] & kFilled)) return;
    const index_t s = slot_of_unique[u], row = uniq[u];
    const std::int32_t D = cache.dim;
    const std::uint8_t* src = store + static_cast<std::size_t>(row) * stride;
    float* crow = cache.row(s);
    for (std::int32_t c = lane_chunk_begin(lane); c < D; c += lane_chunk_step(lanes)) {
      const std::int32_t m = D - c < kLaneChunk ? D - c : kLaneChunk;
      float x[kLaneChunk];
      decode_chunk<Storage>(src, D, c, m, x);
      store_lane_chunk(crow + c, m, x);
    }
    if (lane == 0) state.fill(s, row);
  }
};

}  // namespace mpe::detail
