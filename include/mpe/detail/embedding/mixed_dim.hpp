// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/mixed_dim.hpp
/// @brief MixedDimEmbedding's host-side plumbing (included by
/// mpe/embedding/mixed_dim_embedding.hpp): the table -> group layout, the check of a whole
/// batch, the split of a table-major CSR batch into one CSR per group, the column copies
/// between (B, k*D_g) group buffers and the (B, sum D_t) caller buffers, and group messages
/// in the caller's numbering. Plain loops over host memory; with backend-resident spans
/// (`Backend::device_spans`) the batch lives in MixedDeviceBatch buffers instead and the
/// per-item code of detail/kernels/mixed_dim.hpp runs the checks, split and copies
/// (detail/embedding/mixed_dim_device.inl), these loops naming a fault on a host copy.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpe/backend/buffer.hpp"
#include "mpe/numeric/config.hpp"

namespace mpe::detail {

inline std::string md_prefix(const char* fn) { return std::string("mpe::MixedDimEmbedding::") + fn + ": "; }

/// A group's error message in the caller's numbering: the group's "row R (... table k,
/// local row r)" becomes "a row (... table tables[k], row r)" and its
/// "mpe::CachedEmbedding::backward: " prefix is dropped.
inline std::string caller_numbering(const std::string& what, const std::vector<std::int64_t>& tables) {
  std::string s = what;
  if (const std::string p = "mpe::CachedEmbedding::backward: "; s.rfind(p, 0) == 0) s = s.substr(p.size());
  if (s.rfind("row ", 0) == 0) {
    const std::size_t paren = s.find(" (");
    if (paren != std::string::npos) s = "a row" + s.substr(paren);
  }
  const std::string key = "; table ", local_key = ", local row ";
  const std::size_t at = s.find(key);
  const std::size_t local = at == std::string::npos ? std::string::npos : s.find(local_key, at);
  if (local != std::string::npos) {
    const std::string num = s.substr(at + key.size(), local - at - key.size());
    if (!num.empty() && num.find_first_not_of("0123456789") == std::string::npos) {
      const auto k = static_cast<std::size_t>(std::stoull(num));
      if (k < tables.size()) {
        s = s.substr(0, at) + key + std::to_string(tables[k]) + ", row " + s.substr(local + local_key.size());
      }
    }
  }
  return s;
}

/// Which group (one D) each table belongs to, its place there, and its output columns.
struct MixedLayout {
  std::vector<std::int64_t> rows, dims;                 // (T) per table
  std::vector<std::int64_t> group_of;                   // (T) group index
  std::vector<std::int64_t> local;                      // (T) table index inside its group
  std::vector<std::int64_t> column;                     // (T) first output column, prefix sum of dims
  std::int64_t total_dim = 0;                           // sum of dims
  std::vector<std::int32_t> group_dim;                  // (G)
  std::vector<std::vector<std::int64_t>> group_tables;  // (G) tables in spec order

  std::int64_t T() const { return static_cast<std::int64_t>(rows.size()); }
  std::size_t G() const { return group_dim.size(); }
  std::size_t bytes() const {
    std::size_t b = (rows.size() * 5) * sizeof(std::int64_t) + group_dim.size() * sizeof(std::int32_t);
    for (const auto& g : group_tables) b += g.size() * sizeof(std::int64_t);
    return b;
  }
};

/// One group's share of a batch: its tables' bags in order, offsets rebased to 0.
struct GroupBatch {
  std::vector<std::int64_t> indices;  // (n_g)
  std::vector<std::int64_t> offsets;  // (k*B + 1)
  std::vector<float> weights;         // (n_g) or empty
  std::vector<float> buffer;          // (B, k*D_g): output or gradient columns
  std::size_t bytes() const {
    return (indices.capacity() + offsets.capacity()) * sizeof(std::int64_t) +
           (weights.capacity() + buffer.capacity()) * sizeof(float);
  }
  std::span<const std::int64_t> idx() const { return indices; }
  std::span<const std::int64_t> offs() const { return offsets; }
  std::span<const float> wts() const { return weights; }
  std::span<float> buf() { return buffer; }
  /// The (B, k*D_g) buffer resized to n elements.
  std::span<float> sized_buf(std::size_t n) {
    buffer.resize(n);
    return buffer;
  }
};

/// GroupBatch in backend memory (`Backend::device_spans`): buffers that grow and are
/// reused, and the sizes of the batch they hold.
template <class Backend>
struct MixedDeviceBatch {
  Buffer<index_t, Backend> indices, offsets;  // (n), (k*B + 1)
  Buffer<float, Backend> weights, buffer;     // (nw), (B, k*D_g)
  std::size_t n = 0, m = 0, nw = 0, nbuf = 0;
  explicit MixedDeviceBatch(const Backend& b) {
    indices.set_backend(b);
    offsets.set_backend(b);
    weights.set_backend(b);
    buffer.set_backend(b);
  }
  std::size_t bytes() const { return indices.bytes() + offsets.bytes() + weights.bytes() + buffer.bytes(); }
  std::span<const std::int64_t> idx() const { return {indices.data(), n}; }
  std::span<const std::int64_t> offs() const { return {offsets.data(), m}; }
  std::span<const float> wts() const { return {weights.data(), nw}; }
  std::span<float> buf() { return {buffer.data(), nbuf}; }
  /// The (B, k*D_g) buffer resized to n elements (contents lost when it grows).
  std::span<float> sized_buf(std::size_t n) {
    buffer.reserve_discard(n);
    nbuf = n;
    return buf();
  }
};

/// A call's batch verdict (`Backend::device_spans`, several groups): `dev` (backend memory,
/// 2T + 2 values) holds the fault count, the T + 1 table boundaries offsets[t*B] and each
/// table's base in its group's indices; `host` the first T + 2 of them, read in one wait.
template <class Backend>
struct MixedScratch {
  Buffer<index_t, Backend> dev;
  std::vector<index_t> host;
  MixedScratch() = default;
  MixedScratch(const Backend& b, std::int64_t T) {
    dev.set_backend(b);
    dev.reset(static_cast<std::size_t>(2 * T + 2));
  }
  /// offsets[t*B] for t in [0, T] (valid once the verdict was read and found clean).
  index_t bound(std::int64_t t) const { return host[static_cast<std::size_t>(t) + 1]; }
};

/// The checks CachedEmbedding::forward makes, on the whole batch, before any group runs,
/// with messages in the caller's positions and tables. Returns B. Throws
/// std::invalid_argument naming the argument and the value.
inline std::int64_t check_mixed_batch(const char* fn, const MixedLayout& L, std::span<const std::int64_t> idx,
                                      std::span<const std::int64_t> off, std::span<const float> w,
                                      bool weights_finite_required) {
  const std::int64_t T = L.T();
  const auto m = static_cast<std::int64_t>(off.size());
  if (m < 1 || (m - 1) % T != 0) {
    throw std::invalid_argument(md_prefix(fn) + "offsets.size() = " + std::to_string(m) +
                                "; must be T*B + 1 with T = " + std::to_string(T) + " tables");
  }
  const std::int64_t B = (m - 1) / T;
  if (off[0] != 0)
    throw std::invalid_argument(md_prefix(fn) + "offsets[0] = " + std::to_string(off[0]) + "; must be 0");
  for (std::size_t j = 1; j < off.size(); ++j) {
    if (off[j] < off[j - 1]) {
      throw std::invalid_argument(md_prefix(fn) + "offsets[" + std::to_string(j) +
                                  "] = " + std::to_string(off[j]) + " < offsets[" + std::to_string(j - 1) +
                                  "] = " + std::to_string(off[j - 1]));
    }
  }
  if (off.back() != static_cast<std::int64_t>(idx.size())) {
    throw std::invalid_argument(md_prefix(fn) + "offsets[" + std::to_string(off.size() - 1) +
                                "] = " + std::to_string(off.back()) +
                                "; must equal indices.size() = " + std::to_string(idx.size()));
  }
  if (!w.empty() && w.size() != idx.size()) {
    throw std::invalid_argument(md_prefix(fn) + "per_sample_weights.size() = " + std::to_string(w.size()) +
                                "; must be 0 or indices.size() = " + std::to_string(idx.size()));
  }
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t rows = L.rows[static_cast<std::size_t>(t)];
    for (auto p = off[static_cast<std::size_t>(t * B)]; p < off[static_cast<std::size_t>((t + 1) * B)]; ++p) {
      const std::int64_t r = idx[static_cast<std::size_t>(p)];
      if (r < 0 || r >= rows) {
        throw std::invalid_argument(md_prefix(fn) + "indices[" + std::to_string(p) +
                                    "] = " + std::to_string(r) + " is outside table " + std::to_string(t) +
                                    " (" + std::to_string(rows) + " rows)");
      }
    }
  }
  if (weights_finite_required) {
    for (std::size_t p = 0; p < w.size(); ++p) {
      if (!std::isfinite(w[p])) {
        throw std::invalid_argument(md_prefix(fn) + "per_sample_weights[" + std::to_string(p) +
                                    "] = " + std::to_string(w[p]) + " is not finite");
      }
    }
  }
  return B;
}

/// Throws std::invalid_argument (prefixed with mpe::MixedDimEmbedding::`fn`) naming the
/// first non-finite element of grad_output (B, W) by its row and column.
inline void check_grad_finite(const char* fn, std::span<const float> grad, std::int64_t W) {
  for (std::size_t i = 0; i < grad.size(); ++i) {
    if (!std::isfinite(grad[i])) {
      const auto w = static_cast<std::size_t>(W);
      throw std::invalid_argument(md_prefix(fn) + "grad_output[" + std::to_string(i / w) + ", " +
                                  std::to_string(i % w) + "] = " + std::to_string(grad[i]) +
                                  " is not finite");
    }
  }
}

/// Group g's CSR share of a valid batch (B bags per table).
inline void split_mixed_batch(const MixedLayout& L, std::size_t g, std::span<const std::int64_t> idx,
                              std::span<const std::int64_t> off, std::span<const float> w, std::int64_t B,
                              GroupBatch& out) {
  const auto& tabs = L.group_tables[g];
  const auto at = [&](std::int64_t j) { return off[static_cast<std::size_t>(j)]; };
  std::size_t n = 0;
  for (std::int64_t t : tabs) n += static_cast<std::size_t>(at((t + 1) * B) - at(t * B));
  out.indices.resize(n);
  out.weights.resize(w.empty() ? 0 : n);
  out.offsets.resize(tabs.size() * static_cast<std::size_t>(B) + 1);
  out.offsets[0] = 0;
  std::size_t pos = 0, j = 0;
  for (std::int64_t t : tabs) {
    const auto first = static_cast<std::size_t>(at(t * B)), last = static_cast<std::size_t>(at((t + 1) * B));
    std::copy(idx.begin() + static_cast<std::ptrdiff_t>(first),
              idx.begin() + static_cast<std::ptrdiff_t>(last),
              out.indices.begin() + static_cast<std::ptrdiff_t>(pos));
    if (!w.empty()) {
      std::copy(w.begin() + static_cast<std::ptrdiff_t>(first), w.begin() + static_cast<std::ptrdiff_t>(last),
                out.weights.begin() + static_cast<std::ptrdiff_t>(pos));
    }
    for (std::int64_t i = 0; i < B; ++i) {
      out.offsets[++j] =
          static_cast<std::int64_t>(pos) + at(t * B + i + 1) - static_cast<std::int64_t>(first);
    }
    pos += last - first;
  }
}

/// Copies between group g's buffer (B, k*D_g) and its tables' columns of a caller buffer
/// (B, sum D_t): `ToCaller` scatters a group's output into the caller's; otherwise it
/// gathers the caller's gradient columns into the group's buffer.
template <bool ToCaller, class C>  // C: float (scatter) or const float (gather)
inline void copy_mixed_columns(const MixedLayout& L, std::size_t g, float* group, C* caller, std::int64_t B) {
  const auto& tabs = L.group_tables[g];
  const auto D = static_cast<std::size_t>(L.group_dim[g]);
  const std::size_t k = tabs.size(), W = static_cast<std::size_t>(L.total_dim);
  for (std::size_t b = 0; b < static_cast<std::size_t>(B); ++b) {
    for (std::size_t i = 0; i < k; ++i) {
      C* c = caller + b * W + static_cast<std::size_t>(L.column[static_cast<std::size_t>(tabs[i])]);
      float* own = group + (b * k + i) * D;
      if constexpr (ToCaller) {
        std::memcpy(c, own, D * sizeof(float));
      } else {
        std::memcpy(own, c, D * sizeof(float));
      }
    }
  }
}

}  // namespace mpe::detail
