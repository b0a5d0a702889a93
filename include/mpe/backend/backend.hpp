// SPDX-License-Identifier: Apache-2.0
/// @file mpe/backend/backend.hpp
/// @brief The `ExecutionBackend` concept: what a backend provides to CachedEmbedding.
///
/// A backend owns a memory space and runs mpe's per-item functors (`MPE_HOST_DEVICE`
/// structs with `operator()(index_t) const`, one item = one bag, set or unique row) over
/// that memory. Two ship with mpe: HostBackend (host memory, OpenMP loops,
/// synchronous) and CudaBackend (device memory, kernels and CUB on one stream,
/// asynchronous). A new backend (another accelerator, a pinned-host/UVM variant, a thread
/// pool) provides the members below and nothing else; no library file needs an edit.
///
/// The members and their contracts:
/// - `static constexpr bool device_spans`: true when the indices, offsets, outputs and
///   gradients passed to CachedEmbedding live in the backend's memory (false: host memory).
/// - `static constexpr bool asynchronous`: true when calls only queue work; reading backend
///   memory then needs `copy_to_host` (which waits).
/// - `static constexpr const char* name`: shown in messages and benchmark names.
/// - `allocate(bytes, MemoryPurpose)` / `deallocate(p, bytes, MemoryPurpose)`: backend
///   memory, 64-byte aligned at least; allocate throws std::bad_alloc or
///   std::runtime_error, never returns null.
/// - `copy_to_host(dst, src, bytes)`: backend to host; returns when the bytes are on the
///   host (waits for queued work).
/// - `copy_from_host(dst, src, bytes)`, `copy(dst, src, bytes)` and
///   `fill_bytes(dst, value, bytes)`: host to backend, backend to backend, memset; may be
///   queued.
/// - `synchronize()`: waits for all queued work.
/// - `for_each(n, f)`: calls `f(i)` once for every i in [0, n), in any order and
///   concurrently; f writes disjoint outputs (integer atomics allowed).
/// - `lane_width` (static constexpr std::int32_t >= 1) and `for_each_lanes(n, f)`: calls
///   `f(i, lane, lane_width)` once for every item i in [0, n) and lane in [0, lane_width);
///   the lanes of one item run together (on a GPU, one warp per item) and split the
///   item's elements among them (detail::lane_chunks), so a row's D elements are read
///   coalesced. A laned functor computes each element exactly as with one lane (the
///   same operations in the same order; a row's min and max, exact in any order, may be a
///   reduction across the lanes that keeps the element the one-lane scan keeps), so the
///   width never changes a bit. In device code a width of 32 must be one whole converged
///   warp per item (laned stores reduce with warp shuffles there). HostBackend's width is
///   1; tests/reference/async_backend.hpp runs 32 lanes one after another to pin the laned
///   code on the CPU.
/// - `stable_sort_by_key(keys, values, n, key_bits)`: stable: equal keys keep their
///   order, so the result does not depend on the thread or block count. Integral keys in
///   [0, 2^key_bits); a backend may sort only those bits.
/// - `exclusive_scan(in, out, n)`: integers only (exact in any order).
/// - `reduce_to(n, f, out)`: `*out` (backend memory) = sum of f(i) over [0, n) for an
///   integer or integer-aggregate type; exact in any order.
///
/// Float math never goes through a backend primitive: every float reduction is written in
/// the functors in one fixed order (docs/numerics.md), which is why any backend that meets
/// this contract gives the same bits as the others.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "mpe/backend/memory_purpose.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe {

namespace backend_probe {
/// A per-item functor of the shape mpe's kernels have (used only to check the concept).
struct Item {
  /// Does nothing for item i: only its signature matters (`for_each(n, f)`).
  MPE_HOST_DEVICE void operator()(index_t) const {}
};
/// A laned per-item functor (used only to check the concept).
struct LanedItem {
  /// Does nothing for lane `lane` of `lanes` of item i: only its signature matters
  /// (`for_each_lanes(n, f)`).
  MPE_HOST_DEVICE void operator()(index_t, std::int32_t, std::int32_t) const {}
};
/// An integer-valued per-item functor (used only to check the concept).
struct Count {
  /// Returns 1 for every item: only its signature matters (`reduce_to(n, f, out)`).
  MPE_HOST_DEVICE std::int64_t operator()(index_t) const { return 1; }
};
}  // namespace backend_probe

/// Whether the lanes of one item of `B::for_each_lanes` run together as one CUDA warp
/// (`static constexpr bool warp_lanes = true`, CudaBackend): laned functors may then
/// exchange values between the lanes inside one call (warp shuffles), and CachedEmbedding
/// fuses laned kernels whose lanes would otherwise read each other's writes. Optional;
/// false when absent (HostBackend, and tests' lanes run one after another).
template <class B>
inline constexpr bool warp_lanes = requires {
  requires B::warp_lanes;
};

/// An execution backend for CachedEmbedding: see the file comment for each member's
/// contract. Checked when CachedEmbedding is instantiated.
template <class B>
concept ExecutionBackend = std::copy_constructible<B> &&
    requires(const B& b, void* p, const void* cp, std::size_t bytes, index_t n, index_t* keys,
             index_t* values, std::int64_t* out) {
  { B::device_spans } -> std::convertible_to<bool>;
  { B::asynchronous } -> std::convertible_to<bool>;
  { B::name } -> std::convertible_to<const char*>;
  { B::lane_width } -> std::convertible_to<std::int32_t>;
  { b.allocate(bytes, MemoryPurpose::Workspace) } -> std::same_as<void*>;
  b.deallocate(p, bytes, MemoryPurpose::Workspace);
  b.copy_to_host(p, cp, bytes);
  b.copy_from_host(p, cp, bytes);
  b.copy(p, cp, bytes);
  b.fill_bytes(p, 0, bytes);
  b.synchronize();
  b.for_each(n, backend_probe::Item{});
  b.for_each_lanes(n, backend_probe::LanedItem{});
  b.stable_sort_by_key(keys, values, n, 64);
  b.exclusive_scan(keys, values, n);
  b.reduce_to(n, backend_probe::Count{}, out);
};

}  // namespace mpe
