// SPDX-License-Identifier: Apache-2.0
/// @file mpe/sharded/comm.hpp
/// @brief The communicator concept of mpe's sharded training (`mpe::sharded`): the few
/// collectives ShardedEmbedding needs, implemented by MpiComm (mpi_comm.hpp) and NcclComm
/// (nccl_comm.hpp) on existing engines. This header needs neither MPI nor NCCL.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

namespace mpe::sharded {

/// A communicator over `size()` ranks, this process being `rank()`. Every member is a
/// collective: all ranks call it, in the same order, with matching sizes; it returns when
/// this rank's part is done (the received data are in host memory on return).
///
/// - `alltoallv(send, send_counts, recv, recv_counts)`: typed all-to-all for T in
///   {std::int64_t, std::uint64_t, float, std::uint16_t}. `send_counts[r]` elements go to
///   rank r, taken consecutively from `send` in rank order; `recv_counts[r]` elements come
///   from rank r, placed consecutively in `recv` in rank order (displacements are the
///   exclusive prefix sums). Both count spans have size() entries, in elements. Host spans.
/// - `allreduce_max(values)`: element-wise maximum over ranks, in place (std::int64_t).
/// - `allreduce_sum(values)`: element-wise sum over ranks, in place (std::uint64_t;
///   integer sums, so the result does not depend on the order).
/// - `broadcast(bytes, root)`: root's bytes to every rank, in place.
///
/// Errors: an engine failure throws std::runtime_error naming the call and the engine's
/// message; counts beyond the engine's limit throw std::length_error before any transfer.
template <class C>
concept Communicator = requires(C& c, std::span<const std::int64_t> si, std::span<std::int64_t> ri,
                                std::span<const std::uint64_t> su, std::span<std::uint64_t> ru,
                                std::span<const float> sf, std::span<float> rf,
                                std::span<const std::uint16_t> sh, std::span<std::uint16_t> rh,
                                std::span<const std::int64_t> counts, std::span<char> bytes) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.alltoallv(si, counts, ri, counts);
  c.alltoallv(su, counts, ru, counts);
  c.alltoallv(sf, counts, rf, counts);
  c.alltoallv(sh, counts, rh, counts);
  c.allreduce_max(ri);
  c.allreduce_sum(ru);
  c.broadcast(bytes, 0);
};

}  // namespace mpe::sharded
