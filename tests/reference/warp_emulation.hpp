// SPDX-License-Identifier: Apache-2.0
// A CUDA warp emulated on the host: 32 threads, one per lane, that meet at every warp call,
// so code written against mpe::detail's WarpOps (ballot, shfl; CudaWarp on a GPU) runs on a
// CPU with the intrinsics' semantics. A lane that skips a call its warp makes (divergent
// collective code, a bug on a GPU) leaves the others waiting: after 30 s the warp is marked
// broken and every wait returns, so the test fails (`broken()`) instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace ref {

class EmulatedWarp {
 public:
  static constexpr int kLanes = 32;

  /// One lane's WarpOps: ballot(p) and shfl(v, src) as __ballot_sync / __shfl_sync with the
  /// full mask.
  class Lane {
   public:
    Lane(EmulatedWarp* w, int lane) : w_(w), lane_(lane) {}
    unsigned ballot(bool p) const {
      w_->value_[lane_] = p ? 1u : 0u;
      w_->meet();
      unsigned m = 0;
      for (int l = 0; l < kLanes; ++l) m |= (w_->value_[l] != 0 ? 1u : 0u) << l;
      w_->meet();  // every lane has read before any writes again
      return m;
    }
    template <class T>
    T shfl(T v, std::int32_t src) const {
      static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t));
      std::uint64_t x = 0;
      std::memcpy(&x, &v, sizeof v);
      w_->value_[lane_] = x;
      w_->meet();
      T r;
      std::memcpy(&r, &w_->value_[src], sizeof r);
      w_->meet();
      return r;
    }

   private:
    EmulatedWarp* w_;
    int lane_;
  };

  /// Runs f(lane_ops, lane) for the 32 lanes at once, one thread each; returns when all end.
  template <class F>
  void run(F f) {
    std::vector<std::thread> t;
    t.reserve(kLanes);
    for (int l = 0; l < kLanes; ++l) t.emplace_back([this, &f, l] { f(Lane(this, l), l); });
    for (auto& x : t) x.join();
  }
  /// A lane waited 30 s for the others at a warp call: the lanes did not call alike.
  bool broken() const { return broken_; }

 private:
  void meet() {
    std::unique_lock<std::mutex> lk(m_);
    if (broken_) return;
    const std::uint64_t g = generation_;
    if (++arrived_ == kLanes) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lk, std::chrono::seconds(30), [&] { return generation_ != g || broken_; })) {
      broken_ = true;
      cv_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool broken_ = false;
  std::uint64_t value_[kLanes] = {};
};

}  // namespace ref
