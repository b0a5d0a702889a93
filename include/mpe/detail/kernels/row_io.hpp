// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/row_io.hpp
/// @brief Whole-row reads and writes of the store and the cache: get/set_weights, the
/// representability check, initializers, dropping cache lines and flush.
/// Per-item functors of CachedEmbedding (not public): trivially copyable,
/// `MPE_HOST_DEVICE`, run by HostBackend through Thrust and launched as kernels by
/// CudaBackend; each writes disjoint outputs per item.
#pragma once

#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/core/types.hpp"
#include "mpe/detail/kernels/portable_paths.hpp"
#include "mpe/detail/kernels/state_ref.hpp"
#include "mpe/detail/kernels/statistics.hpp"
#include "mpe/detail/kernels/validation.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe::detail {

/// First element of rows (count, D) that Storage cannot hold (position i*D + d).
template <class Storage>
struct CheckRepresentable {
  const float* src;
  std::int32_t D;
  index_t* bad_pos;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    const std::int32_t d = Storage::find_unrepresentable(src + i * D, D);
    if (d >= 0) atomic_min(bad_pos, i * D + d);
  }
};

/// Writes rows [first, first + count) into the store with Rounding (site SetWeights or
/// Init) and drops their cache lines without writing them back.
template <class Storage, class Rounding, class Paths = PortablePaths>
struct WriteRows {
  CacheRef cache;
  std::uint8_t* store;
  std::size_t stride;
  index_t first;
  const float* src;  // (count, D)
  num::RowStream stream;
  const std::uint64_t* step;  // (1) completed backward() calls
  num::RoundingSite site;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    const index_t r = first + i;
    const num::RowRng rng = stream.at(r, static_cast<std::uint32_t>(*step), site);
    Paths::template store_row<Storage, Rounding>(src + i * cache.dim, cache.dim,
                                                 store + static_cast<std::size_t>(r) * stride, rng);
    if (const index_t s = cache.find(r); s >= 0) cache.drop(s);
  }
};

/// Drops the cache line of slot s if it holds a global row in [first, first + count),
/// without write-back (the rows were replaced in the store).
struct DropRows {
  CacheRef cache;
  index_t first, count;
  MPE_HOST_DEVICE void operator()(index_t s) const {
    const index_t r = cache.tags[s];
    if (r >= first && r < first + count) cache.drop(s);
  }
};

/// Sets row r's slot index entry to -1 (not cached).
struct ClearSlotEntry {
  CacheRef cache;  // slot_of_row non-null
  MPE_HOST_DEVICE void operator()(index_t r) const { *cache.slot_entry(r) = -1; }
};

/// Records slot s in the slot index if it holds a row (the index is all -1 beforehand):
/// CachedEmbedding::reindex_slots(), after the tags are replaced wholesale.
struct IndexSlot {
  CacheRef cache;  // slot_of_row non-null
  MPE_HOST_DEVICE void operator()(index_t s) const {
    if (const index_t r = cache.tags[s]; r >= 0) *cache.slot_entry(r) = static_cast<std::int32_t>(s);
  }
};

/// Fills rows with uniform values in [low, high) from Philox (key seed ^ 0x9e3779b97f4a7c15;
/// counter: the row's key, step 0, site Init, one block per 4 elements from its table's
/// column key: stream.at), written to `out` (count, D) in FP32.
struct UniformRows {
  num::RowStream stream;
  index_t first;
  std::int32_t D;
  float low, high;
  float* out;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    num::RowRng rng = stream.at(first + i, 0, num::RoundingSite::Init);
    rng.seed ^= 0x9e3779b97f4a7c15ull;
    const float span = num::sub(high, low);
    for (std::int32_t g = 0; 4 * g < D; ++g) {
      const num::Uint4 w = rng.draw(static_cast<std::uint32_t>(g));
      for (std::int32_t d = 4 * g; d < D && d < 4 * g + 4; ++d) {
        const float u = num::mul(static_cast<float>(num::word(w, d - 4 * g) >> 8), 0x1p-24f);
        float v = num::add(low, num::mul(span, u));
        out[i * D + d] = v < high ? v : low;
      }
    }
  }
};

/// Writes back one dirty slot (site Flush) and clears its dirty bit.
template <class Storage, class Rounding, class Paths = PortablePaths>
struct FlushSlots {
  CacheRef cache;
  std::uint8_t* store;
  std::size_t stride;
  num::RowStream stream;
  const std::uint64_t* step;  // (1) completed backward() calls
  std::uint8_t* outcome;      // (slots)
  StateRef state{};           // compact optimizer state: written back with the row
  MPE_HOST_DEVICE void operator()(index_t s) const {
    outcome[s] = 0;
    if (cache.tags[s] < 0 || !cache.dirty[s]) return;
    const index_t r = cache.tags[s];
    const num::RowRng rng = stream.at(r, static_cast<std::uint32_t>(*step), num::RoundingSite::Flush);
    bool sat = Paths::template store_row<Storage, Rounding>(
        cache.row(s), cache.dim, store + static_cast<std::size_t>(r) * stride, rng);
    sat = state.template write_back<Rounding>(s, r, static_cast<std::uint32_t>(*step),
                                              num::RoundingSite::StateFlush) ||
          sat;
    cache.dirty[s] = 0;
    outcome[s] = static_cast<std::uint8_t>(kWroteBack | (sat ? kSaturated : 0));
  }
};

}  // namespace mpe::detail
