// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/checks.inl
/// @brief CachedEmbedding: argument checks, the validation record's verdict, error messages,
/// deferred errors (included by mpe/embedding/cached_embedding.hpp).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>

#include "mpe/detail/kernels/all.hpp"

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::check_row_range(
    const char* fn, const char* arg, std::size_t size, std::int64_t first_row) const {
  const auto D = static_cast<std::size_t>(config_.dim);
  if (size % D != 0) {
    detail::invalid(fn, std::string(arg) + ".size() = " + std::to_string(size) +
                            " is not a multiple of dim " + std::to_string(D));
  }
  const auto rows = static_cast<index_t>(size / D);
  if (first_row < 0 || first_row > total_rows_ || rows > total_rows_ - first_row) {
    detail::invalid(fn, "first_row = " + std::to_string(first_row) + " with " + std::to_string(rows) +
                            " rows leaves the table of " + std::to_string(total_rows_) + " rows");
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::check_output_size(const char* fn,
                                                                                           std::size_t size,
                                                                                           index_t B) const {
  const index_t T = num_tables();
  if (size != static_cast<std::size_t>(B * T * config_.dim)) {
    detail::invalid(fn, "output.size() = " + std::to_string(size) +
                            "; expected B*T*D = " + std::to_string(B) + "*" + std::to_string(T) + "*" +
                            std::to_string(config_.dim) + " (B = (offsets.size() - 1) / T)");
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
index_t CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::check_shapes(
    const char* fn, std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
    std::span<const float> weights, Pooling pooling, std::size_t output_size) const {
  const index_t T = num_tables();
  if (offsets.empty() || (offsets.size() - 1) % static_cast<std::size_t>(T) != 0) {
    detail::invalid(fn, "offsets.size() = " + std::to_string(offsets.size()) +
                            "; must be T*B + 1 with T = " + std::to_string(T));
  }
  if (pooling != Pooling::Sum && pooling != Pooling::Mean) {
    detail::invalid(fn, "pooling = " + std::to_string(static_cast<int>(pooling)) +
                            " is not a Pooling value (Sum = 0, Mean = 1)");
  }
  const index_t B = static_cast<index_t>(offsets.size() - 1) / T;
  if (output_size != kSkipOutputCheck) check_output_size(fn, output_size, B);
  if (!weights.empty()) {
    if (pooling != Pooling::Sum) {
      detail::invalid(fn, "per_sample_weights need Pooling::Sum (got Pooling::Mean with " +
                              std::to_string(weights.size()) + " weights)");
    }
    if (weights.size() != indices.size()) {
      detail::invalid(fn, "per_sample_weights.size() = " + std::to_string(weights.size()) +
                              "; must equal indices.size() = " + std::to_string(indices.size()));
    }
  }
  return B;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::queue_checks(
    detail::CallRecord* rec, std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
    std::span<const float> weights, index_t B, index_t* global_rows, index_t* bag_of) const {
  const index_t bags = static_cast<index_t>(offsets.size()) - 1;
  const auto n = static_cast<index_t>(indices.size());
  backend_.for_each(bags + 1, detail::CheckOffsets{offsets.data(), bags, n, rec});
  if (!weights.empty()) {
    backend_.for_each(n, detail::CheckFinite{weights.data(), &rec->pos[detail::kWeights]});
  }
  const detail::ExpandBags expand{
      indices.data(), offsets.data(), table_offsets_.data(), B, global_rows, bag_of, rec};
  if (Backend::lane_width > 1 && n >= 4 * bags) {
    backend_.for_each_lanes(bags, expand);  // a warp per bag: contiguous reads and writes
  } else {
    backend_.for_each(bags, expand);
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
detail::CallRecord CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::read_record(
    const detail::CallRecord* rec) const {
  detail::CallRecord r;
  backend_.copy_to_host(&r, rec, sizeof r);
  return r;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
std::string CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::describe(
    int check, index_t pos, const index_t* v) const {
  using namespace detail;
  const auto s = [](index_t x) { return std::to_string(x); };
  const auto f = [](index_t bits) { return format_float(num::bits_float(static_cast<std::uint32_t>(bits))); };
  switch (check) {
    case kOffsetsFirst:
      return "offsets[0] = " + s(v[0]) + "; must be 0";
    case kOffsetsLast:
      return "offsets[" + s(pos) + "] = " + s(v[0]) + "; must equal indices.size() = " + s(v[1]);
    case kOffsetsOrder:
      return "offsets[" + s(pos + 1) + "] = " + s(v[1]) + " < offsets[" + s(pos) + "] = " + s(v[0]) +
             "; offsets must be non-decreasing";
    case kWeights:
      return "per_sample_weights[" + s(pos) + "] = " + f(v[0]) + " is not finite";
    case kIndex:
      return "indices[" + s(pos) + "] = " + s(v[0]) + " is outside table " + s(v[2]) + " (" +
             s(config_.table_rows[static_cast<std::size_t>(v[2])]) + " rows; bag " + s(v[1]) + ")";
    case kMismatch:
      return (pos < v[0] ? "indices[" + s(pos) + "] differs" : "offsets[" + s(pos - v[0]) + "] differs") +
             " from the pending prefetch()'s batch of the same sizes; under Validation::Deferred a "
             "forward() with the prefetched sizes must pass the prefetched batch";
    case kGrad:
      return "grad_output[" + s(pos) + "] = " + f(v[0]) + " is not finite";
    case kOverflow: {
      const auto& first = table_offsets_host_;
      const auto t =
          static_cast<index_t>(std::upper_bound(first.begin(), first.end(), v[0]) - first.begin()) - 1;
      return "row " + s(v[0]) + " (its gradient summed over " + s(v[1]) + " occurrence(s); table " + s(t) +
             ", local row " + s(v[0] - first[static_cast<std::size_t>(t)]) +
             ") overflows in this step: its summed gradient, new optimizer state or update is " + f(v[2]) +
             " although grad_output is finite; nothing was updated (scale the loss down, or use "
             "NonFinite::Skip to skip such steps)";
    }
    default:
      return "unknown check " + s(check);
  }
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::throw_if_failed(
    const char* fn, const detail::CallRecord& r, bool skip_non_finite, Batch* drop) const {
  const int c = detail::first_failure(r, skip_non_finite);
  if (c < 0) return;
  if (drop) drop->stage = detail::BatchStage::empty;  // the batch this call was preparing
  detail::invalid(fn, describe(c, r.pos[c], r.v[c]));
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::throw_deferred() {
  detail::DeferredError d;
  backend_.copy_to_host(&d, deferred_.data(), sizeof d);
  if (d.check < 0) return;
  backend_.fill_bytes(deferred_.data(), 0xff, sizeof d);
  backend_.for_each(1, detail::SetIndex{&deferred_.data()->later, 0});
  std::string what = std::string("mpe::CachedEmbedding::") + detail::call_name(d.call) + " (deferred, call " +
                     std::to_string(d.seq) + "): " + describe(static_cast<int>(d.check), d.pos, d.v);
  if (d.later > 0) {
    what += "; " + std::to_string(d.later) + " later call" + (d.later > 1 ? "s" : "") +
            " failed validation too and changed nothing";
  }
  throw std::invalid_argument(what);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, class Backend,
          StatePrecisionPolicy StatePrecision>
void CachedEmbedding<Storage, Cache, Rounding, Backend, StatePrecision>::synchronize() {
  backend_.synchronize();
  throw_deferred();
}

}  // namespace mpe
