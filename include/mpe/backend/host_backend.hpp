// SPDX-License-Identifier: Apache-2.0
/// @file mpe/backend/host_backend.hpp
/// @brief `HostBackend`: runs mpe's per-item code on the CPU with OpenMP (`omp parallel
/// for`, static schedule), with memory from the C++ heap, and names its fast paths
/// (`fast_paths`: detail::HostPaths, the AVX-512 / AVX2 / portable choice of
/// detail/host/dispatch.hpp).
///
/// Every primitive here gives the same result whatever the thread count: per-item work
/// writes disjoint outputs, sorts are stable, and the only reductions are over
/// integers. Public headers never define THRUST_DEVICE_SYSTEM.
#pragma once

#include <omp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "mpe/backend/memory_purpose.hpp"
#include "mpe/detail/host/dispatch.hpp"
#include "mpe/detail/host/radix_sort.hpp"
#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe {

namespace detail {
/// Adapts a laned functor to for_each: lane 0 of 1.
template <class F>
struct OneLane {
  F f;
  void operator()(index_t i) const { f(i, 0, 1); }
};

/// A laned functor that also runs a range of items on one host thread in one call
/// (`host_range(begin, end)`: every item of [begin, end) with one lane, the same bits as
/// item by item); HostBackend::for_each_lanes then hands each thread ranges, not items.
template <class F>
concept HostRanged = requires(const F& f, index_t i) {
  f.host_range(i, i);
};

/// Most items per range of HostBackend::for_each_lanes on several threads.
inline constexpr index_t kHostRangeItems = 256;
}  // namespace detail

/// The host execution backend (the default `Backend` of CachedEmbedding).
///
/// `num_threads` = 0 uses OpenMP's default; n > 0 runs each parallel primitive on n
/// threads (a num_threads clause: the caller's OpenMP setting is untouched). One thread
/// (1, or 0 while OpenMP's default is 1) runs every primitive as a plain loop, and lets CachedEmbedding's
/// backward read grad_output in memory order (detail::ScatterRowGradients); results are the same bits for any
/// thread count. Memory space: host; big store, cache and optimizer allocations ask for huge pages
/// (huge_pages). Spans passed to a CachedEmbedding with this backend are ordinary host memory. All calls are
/// synchronous.
struct HostBackend {
  /// Threads of each parallel primitive: 0 = OpenMP's default, 1 = sequential (plain
  /// loops), n > 1 = n OpenMP threads for that call only.
  int num_threads = 0;

  /// Threads a primitive runs on now: num_threads, or OpenMP's current default
  /// (omp_get_max_threads(), e.g. 1 after torch.set_num_threads(1)) when it is 0. With 1
  /// every primitive runs sequentially and the one-thread paths are taken.
  int threads() const { return num_threads > 0 ? num_threads : omp_get_max_threads(); }

  /// Indices, outputs and gradients live in host memory with this backend.
  static constexpr bool device_spans = false;
  /// Calls run to completion before they return, so reading backend memory never waits.
  static constexpr bool asynchronous = false;
  static constexpr const char* name = "host";  ///< shown in messages and benchmark names
  /// The fast paths of the per-item functors (pooling of a range of bags, the bitmap dedup,
  /// the admission's fills, tag scans and victim lists, row stores): the host's SIMD code,
  /// chosen at run time in detail/host/dispatch.hpp, the same bits as the portable code.
  using fast_paths = detail::HostPaths;

  /// Back the store, the cache and the optimizer state with transparent huge pages (2 MiB)
  /// where the OS offers them: their rows are read at random, and with 4 KiB pages nearly
  /// every row access of a large table also misses the TLB. Linux only; elsewhere, or when the kernel's THP
  /// setting is `never`, the memory is ordinary pages. Never changes a result. Such allocations are rounded
  /// up to whole 2 MiB pages; memory() reports the bytes asked for.
  bool huge_pages = true;
  /// Allocations of at least this many bytes with a purpose other than Workspace get huge
  /// pages (smaller ones would waste most of a 2 MiB page).
  static constexpr std::size_t huge_page_min_bytes = std::size_t{4} << 20;
  /// The huge page size asked for (x86-64 Linux: 2 MiB); such allocations are aligned to it
  /// and rounded up to a multiple of it.
  static constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

  /// Whether allocate(bytes, purpose) asks for huge pages (deallocate decides the same way).
  bool uses_huge_pages(std::size_t bytes, MemoryPurpose purpose) const {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    return huge_pages && purpose != MemoryPurpose::Workspace && bytes >= huge_page_min_bytes;
#else
    (void)bytes;
    (void)purpose;
    return false;
#endif
  }

  /// Allocates `bytes` of host memory, 64-byte aligned; store, cache and optimizer memory
  /// of 4 MiB or more is 2 MiB aligned, rounded up to whole 2 MiB pages and advised
  /// MADV_HUGEPAGE (see huge_pages). Throws std::bad_alloc.
  void* allocate(std::size_t bytes, MemoryPurpose purpose = MemoryPurpose::Workspace) const {
    if (uses_huge_pages(bytes, purpose)) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      const std::size_t rounded = (bytes + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
      void* p = ::operator new (rounded, std::align_val_t{huge_page_bytes});
      (void)madvise(p, rounded, MADV_HUGEPAGE);  // advice only: ordinary pages if it fails
      return p;
#endif
    }
    return ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{64});
  }
  /// Frees memory from allocate() with the same `bytes` and `purpose`. Never throws.
  void deallocate(void* p, std::size_t bytes,
                  MemoryPurpose purpose = MemoryPurpose::Workspace) const noexcept {
    if (uses_huge_pages(bytes, purpose)) {
      ::operator delete (p, std::align_val_t{huge_page_bytes});
      return;
    }
    ::operator delete (p, std::align_val_t{64});
  }
  /// Copies `bytes` from backend memory to host memory (both host here: a memcpy; the
  /// ranges must not overlap). The data are there on return.
  void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  /// Copies `bytes` from host memory to backend memory (a memcpy; no overlap). Synchronous.
  void copy_from_host(void* dst, const void* src, std::size_t bytes) const {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  /// Copies `bytes` between two non-overlapping backend ranges (a memcpy). Synchronous.
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  /// Sets `bytes` of backend memory to the byte `value` (a memset). Synchronous.
  void fill_bytes(void* dst, int value, std::size_t bytes) const {
    if (bytes) std::memset(dst, value, bytes);
  }
  /// Waits for queued work (no-op: host calls are synchronous).
  void synchronize() const {}

  /// Calls f(i) for every i in [0, n), in parallel. f must write disjoint outputs.
  template <class F>
  void for_each(index_t n, F f) const {
    if (n <= 0) return;
    if (n == 1) {  // the single-item steps (validation verdicts, counters): no parallel region
      f(index_t{0});
      return;
    }
    const int t = threads();
    if (t == 1) {
      for (index_t i = 0; i < n; ++i) f(i);
      return;
    }
#pragma omp parallel for num_threads(t) schedule(static)
    for (index_t i = 0; i < n; ++i) f(i);
  }

  /// One lane per item on the host: a core works through a row's elements in order.
  static constexpr std::int32_t lane_width = 1;
  /// Calls f(i, 0, 1) for every i in [0, n), in parallel (for_each). f must write
  /// disjoint outputs per item. A functor with `host_range(begin, end)` (detail::HostRanged,
  /// e.g. forward pooling) gets [0, n) in one call on one thread, else ranges of up to
  /// detail::kHostRangeItems items (at least 4 per thread where n allows), so its per-item
  /// setup is paid once per range.
  template <class F>
  void for_each_lanes(index_t n, F f) const {
    if constexpr (detail::HostRanged<F>) {
      if (n <= 0) return;
      if (threads() == 1) {
        f.host_range(0, n);
        return;
      }
      // Ranges of up to kHostRangeItems items, at least 4 per thread where n allows.
      index_t per = n / (4 * static_cast<index_t>(threads()));
      per = per < 1 ? 1 : (per > detail::kHostRangeItems ? detail::kHostRangeItems : per);
      const index_t ranges = (n + per - 1) / per;
      for_each(ranges, [f, n, per](index_t r) {
        const index_t a = r * per;
        f.host_range(a, a + per < n ? a + per : n);
      });
    } else {
      for_each(n, detail::OneLane<F>{f});
    }
  }

  /// Stable sort of `values` by `keys` (both n long, backend memory): equal keys keep
  /// their order, so the result does not depend on the thread count. Every key must lie in
  /// [0, 2^key_bits) (integral keys; the bound the Backend concept passes, used by the GPU's
  /// radix sort; the host finds the bits in use from the keys): detail::radix_sort_pairs
  /// over the bits in which the keys differ, on the calling thread for any thread count
  /// (no Thrust: its sorts bind references to null system pointers, which
  /// -fsanitize=undefined reports). A stable sort's result is unique.
  template <class K, class V>
  void stable_sort_by_key(K* keys, V* values, index_t n,
                          [[maybe_unused]] int key_bits = 8 * sizeof(K)) const {
    if (n <= 1) return;
    detail::radix_sort_pairs(keys, values, static_cast<std::size_t>(n));
  }

  /// out[i] = in[0] + ... + in[i-1] (integers, so exact in any order); out[0] = 0.
  template <class T>
  void exclusive_scan(const T* in, T* out, index_t n) const {
    if (n <= 0) return;
    T sum{0};
    for (index_t i = 0; i < n; ++i) {  // in may alias out
      const T v = in[i];
      out[i] = sum;
      sum += v;
    }
  }

  /// *out = the sum of f(i) over [0, n) (T{} for n <= 0), written to backend memory, for
  /// an integer (or integer-aggregate) type T: exact, so independent of the order Thrust
  /// picks.
  template <class T, class F>
  void reduce_to(index_t n, F f, T* out) const {
    T result{};
    const int t = n > 1 ? threads() : 1;
    if (t == 1) {
      for (index_t i = 0; i < n; ++i) result = result + f(i);
    } else {
      T* partial = new T[static_cast<std::size_t>(t)]();  // one per thread, summed in thread order
#pragma omp parallel num_threads(t)
      {
        const int k = omp_get_thread_num(), m = omp_get_num_threads();
        T acc{};
        for (index_t i = n * k / m; i < n * (k + 1) / m; ++i) acc = acc + f(i);
        partial[k] = acc;
      }
      for (int k = 0; k < t; ++k) result = result + partial[k];
      delete[] partial;
    }
    *out = result;
  }
};

}  // namespace mpe
