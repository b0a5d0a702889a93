// SPDX-License-Identifier: Apache-2.0
/// @file mpe/backend/buffer.hpp
/// @brief `Buffer<T, Backend>`: an owning, uninitialized array in a backend's memory.
#pragma once

#include <cstddef>
#include <utility>

#include "mpe/backend/memory_purpose.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe::detail {

/// Owning array of n elements of trivially copyable T in Backend memory (host heap or
/// device). Contents are uninitialized after construction or grow(). Move-only.
template <class T, class Backend>
class Buffer {
 public:
  using value_type = T;  ///< the element type
  Buffer() = default;
  Buffer(const Backend& b, std::size_t n) : backend_(b) { reset(n); }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }

  void set_backend(const Backend& b) { backend_ = b; }
  /// What the buffer holds (passed to Backend::allocate/deallocate); set before reset().
  void set_purpose(MemoryPurpose p) { purpose_ = p; }
  /// Replaces the contents with n uninitialized elements.
  void reset(std::size_t n) {
    release();
    if (n) data_ = static_cast<T*>(backend_.allocate(n * sizeof(T), purpose_));
    size_ = n;
  }
  /// Ensures capacity for n elements (contents are lost when it grows).
  void reserve_discard(std::size_t n) {
    if (n > size_) reset(n + n / 2);
  }
  void swap(Buffer& o) noexcept {
    std::swap(backend_, o.backend_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(purpose_, o.purpose_);
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  void release() {
    if (data_) backend_.deallocate(data_, size_ * sizeof(T), purpose_);
    data_ = nullptr;
    size_ = 0;
  }
  Backend backend_{};
  T* data_ = nullptr;
  std::size_t size_ = 0;
  MemoryPurpose purpose_ = MemoryPurpose::Workspace;
};

}  // namespace mpe::detail
