// SPDX-License-Identifier: Apache-2.0
// AsyncHostBackend: HostBackend that declares itself asynchronous with device-resident
// spans, as CudaBackend does, and counts every call that would wait for a device.
//
// CachedEmbedding then takes CudaBackend's code paths on the host (launches sized by the
// batch length instead of its unique-row count, every per-batch size and statistic kept
// in backend memory, set_weights/get_weights/save staged through copies), so the host
// suite checks them bit for bit without a GPU, and the wait counter checks how often a
// call would synchronize with the device.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mpe/backend/host_backend.hpp>

namespace ref {

struct AsyncHostBackend : mpe::HostBackend {
  static constexpr bool asynchronous = true;
  static constexpr bool device_spans = true;
  static constexpr const char* name = "async-host";

  /// Calls that return host values from backend memory (each a stream wait on a GPU).
  std::shared_ptr<std::atomic<long>> waits = std::make_shared<std::atomic<long>>(0);

  void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    ++*waits;
    mpe::HostBackend::copy_to_host(dst, src, bytes);
  }
  void synchronize() const { ++*waits; }

  /// CudaBackend's lane width, the lanes of an item run one after another: pins the
  /// laned code paths (a warp per item on the GPU) on the CPU.
  static constexpr std::int32_t lane_width = 32;
  template <class F>
  void for_each_lanes(mpe::index_t n, F f) const {
    for_each(n, AllLanes<F>{f});
  }

 private:
  template <class F>
  struct AllLanes {
    F f;
    void operator()(mpe::index_t i) const {
      for (std::int32_t lane = 0; lane < lane_width; ++lane) f(i, lane, lane_width);
    }
  };
};

}  // namespace ref
