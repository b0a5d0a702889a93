// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/io/bytes.hpp
/// @brief The little-endian byte sink and the bounds-checked reader that mpe's binary formats
/// share: the checkpoint header (MPECKPT1, io/checkpoint_format.hpp), MixedDimEmbedding's
/// MPEMIXD1 and TieredRows' MPETIER1. The host is little-endian (io/checkpoint_format.hpp
/// asserts it), so a value's bytes are its memory. Needs core only (include/mpe folders
/// form no cycle: tests/layout/check_layout.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpe/core/types.hpp"

namespace mpe::detail::ckpt {

/// Little-endian byte sink.
struct Bytes {
  std::vector<std::uint8_t> v;
  void raw(const void* p, std::size_t n) {
    if (n == 0) return;
    const std::size_t at = v.size();
    v.resize(at + n);
    std::memcpy(v.data() + at, p, n);
  }
  template <class T>
  void put(T x) {
    raw(&x, sizeof x);
  }
  void str(const std::string& s) {
    put(static_cast<std::uint16_t>(s.size()));
    raw(s.data(), s.size());
  }
};

/// Bounds-checked reader of `data[pos, end)` in a file of `file_size` bytes: a field past
/// `end` is "truncated" where `end == file_size`, else it "runs past the end of the header"
/// (a checkpoint reads its header region first). A blob whose fields end before a CRC-32C
/// gives end = file_size = its size - 4. Every failure is a checkpoint_error, `prefix` first,
/// naming the field and the byte offset.
struct Cursor {
  const std::uint8_t* data;
  std::size_t end;  // readable limit
  std::size_t pos;
  std::size_t file_size;
  const std::string& prefix;

  [[noreturn]] void fail(const std::string& what) const { throw checkpoint_error(prefix + what); }
  const std::uint8_t* take(std::size_t n, const char* field) {
    if (n > end - pos) {
      if (end == file_size) {
        fail("truncated at byte " + std::to_string(file_size) + ": " + field + " needs " + std::to_string(n) +
             " bytes at byte " + std::to_string(pos));
      }
      fail(std::string(field) + " at byte " + std::to_string(pos) + " runs past the end of the header");
    }
    const std::uint8_t* p = data + pos;
    pos += n;
    return p;
  }
  template <class T>
  T get(const char* field) {
    T x;
    std::memcpy(&x, take(sizeof x, field), sizeof x);
    return x;
  }
};

}  // namespace mpe::detail::ckpt
