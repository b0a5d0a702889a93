// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/mixed_dim_device.inl
/// @brief MixedDimEmbedding: a batch's check, split over the D-groups and column copies on
/// either memory space (included by mpe/embedding/mixed_dim_embedding.hpp). Host spans
/// (HostBackend): the loops of detail/embedding/mixed_dim.hpp. Backend spans
/// (`Backend::device_spans`, CudaBackend): the per-item code of detail/kernels/mixed_dim.hpp
/// run by the backend, one wait per checked batch (the fault count with the table
/// boundaries); a fault is named by the host checker on a copy, so the message is
/// HostBackend's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpe/detail/embedding/mixed_dim.hpp"
#include "mpe/detail/kernels/mixed_dim.hpp"

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline detail::MixedMeta MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::device_layout()
    const {
  const auto T = static_cast<std::size_t>(layout_.T());
  const index_t* p = meta_.data();
  return detail::MixedMeta{p, p + T, p + 2 * T, p + 3 * T};
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::upload_layout() {
  const auto T = static_cast<std::size_t>(layout_.T());
  std::vector<index_t> h(device_layout_bytes(layout_) / sizeof(index_t));
  std::size_t i = 0;
  for (std::size_t t = 0; t < T; ++t) h[t] = layout_.rows[t];
  for (std::size_t g = 0; g < layout_.G(); ++g) {
    h[3 * T + g] = static_cast<index_t>(i);
    for (const std::int64_t t : layout_.group_tables[g]) {
      h[T + i] = t;
      h[2 * T + i] = layout_.column[static_cast<std::size_t>(t)];
      ++i;
    }
  }
  h[3 * T + layout_.G()] = static_cast<index_t>(i);
  meta_.set_backend(backend_);
  meta_.set_purpose(MemoryPurpose::Metadata);
  meta_.reset(h.size());
  backend_.copy_from_host(meta_.data(), h.data(), h.size() * sizeof(index_t));
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::name_batch_fault(
    const char* fn, std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
    std::span<const float> w, bool weights_finite_required) const {
  std::vector<std::int64_t> idx(indices.size()), off(offsets.size());
  std::vector<float> wh(w.size());
  backend_.copy_to_host(idx.data(), indices.data(), idx.size() * sizeof(std::int64_t));
  backend_.copy_to_host(off.data(), offsets.data(), off.size() * sizeof(std::int64_t));
  backend_.copy_to_host(wh.data(), w.data(), wh.size() * sizeof(float));
  detail::check_mixed_batch(fn, layout_, idx, off, wh, weights_finite_required);
  throw std::logic_error(detail::md_prefix(fn) +
                         "internal error: the backend counted a fault in a batch the host check accepts");
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline std::int64_t MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::check_batch(
    const char* fn, std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
    std::span<const float> w, bool weights_finite_required, scratch_type& s) const {
  if constexpr (!Backend::device_spans) {
    (void)s;
    return detail::check_mixed_batch(fn, layout_, indices, offsets, w, weights_finite_required);
  } else {
    const std::int64_t T = layout_.T();
    const std::size_t m = offsets.size();
    if (m < 1 || (m - 1) % static_cast<std::size_t>(T) != 0 || (!w.empty() && w.size() != indices.size())) {
      name_batch_fault(fn, indices, offsets, w, weights_finite_required);
    }
    const auto B = static_cast<index_t>(m - 1) / T;
    const index_t bags = T * B, n = static_cast<index_t>(indices.size());
    const index_t nw = weights_finite_required ? static_cast<index_t>(w.size()) : 0;
    index_t* d = s.dev.data();
    const detail::MixedMeta meta = device_layout();
    backend_.reduce_to(bags + 1 + nw,
                       detail::CountBatchFaults{indices.data(), offsets.data(), nw > 0 ? w.data() : nullptr,
                                                meta.rows, B, bags, n},
                       d);
    backend_.for_each(static_cast<index_t>(layout_.G()),
                      detail::MixedBounds{meta, offsets.data(), B, T, d + 1, d + T + 2});
    s.host.resize(static_cast<std::size_t>(T) + 2);
    backend_.copy_to_host(s.host.data(), d, s.host.size() * sizeof(index_t));  // the call's one wait
    if (s.host[0] != 0) name_batch_fault(fn, indices, offsets, w, weights_finite_required);
    return B;
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::split(
    std::size_t g, std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
    std::span<const float> w, std::int64_t B, const scratch_type& s, batch_type& b) const {
  if constexpr (!Backend::device_spans) {
    (void)s;
    detail::split_mixed_batch(layout_, g, indices, offsets, w, B, b);
  } else {
    const auto& tabs = layout_.group_tables[g];
    // Indices (and weights): one copy per run of adjacent tables (indices are table-major).
    std::size_t n = 0;
    for (const std::int64_t t : tabs) n += static_cast<std::size_t>(s.bound(t + 1) - s.bound(t));
    b.n = n;
    b.nw = w.empty() ? 0 : n;
    b.indices.reserve_discard(n);
    b.weights.reserve_discard(b.nw);
    std::size_t pos = 0;
    for (std::size_t i = 0; i < tabs.size();) {
      std::size_t j = i + 1;
      while (j < tabs.size() && tabs[j] == tabs[j - 1] + 1) ++j;
      const index_t first = s.bound(tabs[i]), last = s.bound(tabs[j - 1] + 1);
      const auto len = static_cast<std::size_t>(last - first);
      if (len > 0) {
        const auto at = static_cast<std::size_t>(first);
        backend_.copy(b.indices.data() + pos, indices.data() + at, len * sizeof(std::int64_t));
        if (b.nw > 0) backend_.copy(b.weights.data() + pos, w.data() + at, len * sizeof(float));
      }
      pos += len;
      i = j;
    }
    const auto k = static_cast<index_t>(tabs.size());
    b.m = static_cast<std::size_t>(k * B + 1);
    b.offsets.reserve_discard(b.m);
    const detail::MixedMeta meta = device_layout();
    backend_.for_each(static_cast<index_t>(b.m),
                      detail::MixedGroupOffsets{offsets.data(), meta.flat + flat_first(g),
                                                s.dev.data() + layout_.T() + 2, B, k, b.offsets.data()});
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::scatter(
    std::size_t g, batch_type& b, std::span<float> output, std::int64_t B) const {
  if constexpr (!Backend::device_spans) {
    detail::copy_mixed_columns<true>(layout_, g, b.buffer.data(), output.data(), B);
  } else {
    const index_t k = static_cast<index_t>(layout_.group_tables[g].size()), D = layout_.group_dim[g];
    backend_.for_each(
        static_cast<index_t>(b.nbuf),
        detail::MixedColumns<true>{b.buffer.data(), output.data(),
                                   device_layout().flat_column + flat_first(g), k, D, layout_.total_dim});
    (void)B;
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::gather(
    std::size_t g, std::span<const float> grad_output, std::int64_t B, batch_type& b) const {
  const std::span<float> buf = b.sized_buf(group_elements(g, B));
  if constexpr (!Backend::device_spans) {
    detail::copy_mixed_columns<false>(layout_, g, buf.data(), grad_output.data(), B);
  } else {
    const index_t k = static_cast<index_t>(layout_.group_tables[g].size()), D = layout_.group_dim[g];
    backend_.for_each(
        static_cast<index_t>(b.nbuf),
        detail::MixedColumns<false>{buf.data(), grad_output.data(),
                                    device_layout().flat_column + flat_first(g), k, D, layout_.total_dim});
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::check_grad_finite(
    std::span<const float> grad_output) {
  if constexpr (!Backend::device_spans) {
    detail::check_grad_finite("backward", grad_output, layout_.total_dim);
  } else {
    index_t* d = scratch_.dev.data();
    backend_.reduce_to(static_cast<index_t>(grad_output.size()), detail::CountNonFinite{grad_output.data()},
                       d);
    index_t bad = 0;
    backend_.copy_to_host(&bad, d, sizeof bad);  // the call's one wait of its own
    if (bad == 0) return;
    std::vector<float> h(grad_output.size());
    backend_.copy_to_host(h.data(), grad_output.data(), h.size() * sizeof(float));
    detail::check_grad_finite("backward", h, layout_.total_dim);
    throw std::logic_error(
        detail::md_prefix("backward") +
        "internal error: the backend counted a non-finite gradient the host check does not find");
  }
}

}  // namespace mpe
