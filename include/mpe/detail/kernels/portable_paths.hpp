// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/portable_paths.hpp
/// @brief The fast-path seam of the per-item functors (not public): `PortablePaths`, the
/// portable code each customization point stands for, and `paths_of<Backend>`, the paths a
/// backend names (`Backend::fast_paths`, else PortablePaths).
///
/// The functors with a faster form on some backend (pooling: PoolBags; the unique rows:
/// BitmapUnique; the set admission: AdmitSet, SetVictims, ProbeSlots; the backward's scatter
/// and row writes: ScatterRowGradients, ApplyRows, WriteRows, FlushSlots) take the paths as
/// their last template parameter and call its static members where a backend may do the
/// work its own way. Every member gives the bits of the portable code below; a backend's
/// paths type (HostBackend: detail::HostPaths, detail/host/dispatch.hpp) provides every
/// member of this struct. CudaBackend names none and runs the portable code. The choice among
/// a backend's own forms is made per call or per batch (a flag read once, passed down), never
/// through an indirection per row.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/philox.hpp"

namespace mpe::detail {

/// The portable code of every fast path (device and host): see the file comment.
struct PortablePaths {
  /// Whether the backend's own forms are on for this call (read once per call or batch and
  /// passed to the members taking `fast`): never for the portable code.
  MPE_HOST_DEVICE static constexpr bool fast() { return false; }

  /// Whether the backend's one-thread passes run now (the bitmap dedup, the fused admission,
  /// the scatter backward, each with its own bits-equal form): never for the portable code.
  /// Asked once per call, only for a synchronous backend derived from HostBackend.
  template <class B>
  static bool sequential(const B& backend) {
    (void)backend;
    return false;
  }

  /// Storage::store<Rounding>(src, D, row, rng): one row write of a write-back, flush,
  /// store update or set_weights; returns whether a value saturated.
  template <class Storage, class Rounding>
  MPE_HOST_DEVICE static bool store_row(const float* src, std::int32_t D, std::uint8_t* row,
                                        const num::RowRng& rng) {
    return Storage::template store<Rounding>(src, D, row, rng);
  }

  /// A cache fill: store row `src` decoded into the D floats at dst (the Reader's values).
  /// `fast` and `stream` (non-temporal stores) are the backend's; ignored here.
  template <class Storage>
  MPE_HOST_DEVICE static void fill_row(const std::uint8_t* src, std::int32_t D, float* dst, bool fast,
                                       bool stream) {
    (void)fast;
    (void)stream;
    const typename Storage::Reader rd(src, D);
    for (std::int32_t d = 0; d < D; ++d) dst[d] = rd[d];
  }

  /// Whether a populate's fills of a D-column Storage row may stream (then fence_fills ends
  /// the pass): never here.
  template <class Storage>
  static bool stream_fills(std::int32_t D) {
    (void)D;
    return false;
  }

  /// Orders the streamed fills before the pass returns (nothing to order here).
  static void fence_fills() {}

  /// Slot of `row` in the set starting at slot `base`, or -1 (CacheRef::find_in_set).
  MPE_HOST_DEVICE static index_t find_in_set(const CacheRef& c, index_t base, index_t row, bool fast) {
    (void)fast;
    return c.find_in_set(base, row);
  }

  /// SetVictims' list of a set whose policy scores by last use, `ways` a multiple of 8, in
  /// one pass of the backend's own (its count), or -1 where the backend has none (here).
  MPE_HOST_DEVICE static std::int32_t unlocked_by_last_use(const std::int64_t* tags,
                                                           const std::uint64_t* last_use, std::int32_t ways,
                                                           std::uint64_t floor, index_t base,
                                                           std::int64_t* slot, std::uint64_t* score,
                                                           std::uint64_t* key, bool& packed) {
    (void)tags;
    (void)last_use;
    (void)ways;
    (void)floor;
    (void)base;
    (void)slot;
    (void)score;
    (void)key;
    (void)packed;
    return -1;
  }

  /// Whether min_key finds the minimum of SetVictims' keys now (read once per set); without
  /// it SetVictims sorts its keys once per set.
  MPE_HOST_DEVICE static constexpr bool has_min_key() { return false; }

  /// The smallest of the n >= 1 keys at `key` (has_min_key only).
  MPE_HOST_DEVICE static std::uint64_t min_key(const std::uint64_t* key, std::int32_t n) {
    std::uint64_t m = key[0];
    for (std::int32_t k = 1; k < n; ++k) m = key[k] < m ? key[k] : m;
    return m;
  }

  /// BitmapUnique's pass (`f.run(popcount)`, portable std::popcount).
  template <class F>
  static void bitmap_unique(const F& f) {
    f.run(typename F::PortablePopcount{});
  }

  /// A host-only pass compiled for the backend's widest vector unit where it helps (the
  /// backward's scatter, `f.run()`); here as it is.
  template <class F>
  static void run_wide(const F& f) {
    f.run();
  }

  /// Whether pool_range pools bags of Storage now (forward_inference then lets the pooling
  /// read the slot index: PoolBags::probe_out): never here.
  template <class Storage>
  static bool pools_ranges() {
    return false;
  }

  /// Pools bags [j0, j1) of the PoolBags `f` (gate open) the backend's way and returns true,
  /// or returns false, leaving them to the portable loop (here: always).
  template <class F>
  MPE_HOST_DEVICE static constexpr bool pool_range(const F& f, index_t j0, index_t j1) {
    (void)f;
    (void)j0;
    (void)j1;
    return false;
  }
};

/// The fast paths a backend names: `B::fast_paths`, else PortablePaths.
template <class B>
struct PathsOf {
  using type = PortablePaths;  ///< no fast_paths member
};
/// A backend with `using fast_paths = ...;`.
template <class B>
requires requires { typename B::fast_paths; }
struct PathsOf<B> {
  using type = typename B::fast_paths;  ///< the backend's own
};
/// The fast paths of backend B (PathsOf).
template <class B>
using paths_of = typename PathsOf<B>::type;

}  // namespace mpe::detail
