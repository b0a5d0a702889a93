// SPDX-License-Identifier: Apache-2.0
// Helpers of the storage tests: a store row filled with a marker byte, quantize, dequantize.
#pragma once

#include <cstdint>
#include <mpe/storage/all.hpp>
#include <vector>

namespace ref {

/// One Storage x Rounding combination, for typed test lists.
template <class S, class R>
struct Combo {
  using Storage = S;
  using Rounding = R;
};

/// One store row of format S (row_alignment 4), every byte 0xAB.
template <class S>
std::vector<std::uint8_t> new_row(int D) {
  return std::vector<std::uint8_t>(mpe::row_bytes<S>(D, 4), 0xAB);
}

/// S::store<R> of x into row; true when a value was saturated.
template <class S, class R>
bool quant(const std::vector<float>& x, std::vector<std::uint8_t>& row, const mpe::num::RowRng& rng) {
  return S::template store<R>(x.data(), static_cast<std::int32_t>(x.size()), row.data(), rng);
}

/// S::Reader of the row: D FP32 values.
template <class S>
std::vector<float> dequant(const std::vector<std::uint8_t>& row, int D) {
  const typename S::Reader r(row.data(), D);
  std::vector<float> out(static_cast<std::size_t>(D));
  for (int d = 0; d < D; ++d) out[static_cast<std::size_t>(d)] = r[d];
  return out;
}

}  // namespace ref
