// SPDX-License-Identifier: Apache-2.0
/// @file mpe/sharded/mpi_comm.hpp
/// @brief `mpe::sharded::MpiComm`: the Communicator on MPI (MPI_Alltoallv, MPI_Allreduce,
/// MPI_Bcast) over a user-provided MPI_Comm. Needs <mpi.h> (Debian: libopenmpi-dev).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mpe/sharded/comm.hpp"

namespace mpe::sharded {

/// Communicator on an MPI communicator the caller owns (and keeps alive; MPI_Init and
/// MPI_Finalize are the caller's). Host memory only. Every member is collective and
/// blocking. Counts are int in MPI: more than INT_MAX elements to or from one rank, or in
/// total, throw std::length_error on this rank before any transfer (agree on sizes first).
/// MPI errors throw std::runtime_error (the communicator's error handler is set to
/// MPI_ERRORS_RETURN).
class MpiComm {
 public:
  /// Wraps `comm` (not duplicated, not freed: the caller keeps it valid for this object's
  /// lifetime): sets `comm`'s error handler to MPI_ERRORS_RETURN (which the caller's own
  /// calls on `comm` see too), then reads its rank and size. Throws std::runtime_error
  /// naming the MPI call when any of them fails.
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  /// This process's rank in [0, size()) (read at construction; local, no communication).
  int rank() const { return rank_; }
  /// Number of ranks of the communicator (read at construction; local).
  int size() const { return size_; }
  /// The wrapped MPI communicator (still the caller's).
  MPI_Comm handle() const { return comm_; }

  /// Typed MPI_Alltoallv; counts in elements, displacements their prefix sums.
  template <class T>
  void alltoallv(std::span<const T> send, std::span<const std::int64_t> send_counts, std::span<T> recv,
                 std::span<const std::int64_t> recv_counts) {
    std::vector<int> sc, sd, rc, rd;
    to_int(send_counts, send.size(), sc, sd, "send");
    to_int(recv_counts, recv.size(), rc, rd, "recv");
    check(MPI_Alltoallv(send.data(), sc.data(), sd.data(), type<T>(), recv.data(), rc.data(), rd.data(),
                        type<T>(), comm_),
          "MPI_Alltoallv");
  }
  /// Element-wise maximum over all ranks, in place (MPI_Allreduce, MPI_IN_PLACE, MPI_MAX);
  /// `v` (host) has the same size on every rank, at most INT_MAX elements (else
  /// std::length_error before any transfer). Collective and blocking; throws
  /// std::runtime_error on an MPI error.
  void allreduce_max(std::span<std::int64_t> v) {
    check(MPI_Allreduce(MPI_IN_PLACE, v.data(), int_count(v.size(), "allreduce_max"), MPI_INT64_T, MPI_MAX,
                        comm_),
          "MPI_Allreduce(max)");
  }
  /// Element-wise sum over all ranks, in place (MPI_Allreduce, MPI_IN_PLACE, MPI_SUM;
  /// unsigned integers wrap modulo 2^64, so the result does not depend on the order).
  /// Same size on every rank, at most INT_MAX elements (else std::length_error before any
  /// transfer). Collective and blocking; throws std::runtime_error on an MPI error.
  void allreduce_sum(std::span<std::uint64_t> v) {
    check(MPI_Allreduce(MPI_IN_PLACE, v.data(), int_count(v.size(), "allreduce_sum"), MPI_UINT64_T, MPI_SUM,
                        comm_),
          "MPI_Allreduce(sum)");
  }
  /// Copies rank `root`'s `bytes` (host) into every rank's `bytes`, in place (MPI_Bcast);
  /// the same size on every rank, at most INT_MAX bytes (else std::length_error before
  /// any transfer). Collective and blocking; throws std::runtime_error on an MPI error.
  void broadcast(std::span<char> bytes, int root) {
    check(MPI_Bcast(bytes.data(), int_count(bytes.size(), "broadcast"), MPI_CHAR, root, comm_), "MPI_Bcast");
  }

 private:
  static int int_count(std::size_t n, const char* what) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw std::length_error(std::string("MpiComm::") + what + ": " + std::to_string(n) +
                              " elements exceed MPI's int counts");
    return static_cast<int>(n);
  }
  template <class T>
  static MPI_Datatype type() {
    if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
    if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    if constexpr (std::is_same_v<T, std::uint16_t>) return MPI_UINT16_T;
  }
  void to_int(std::span<const std::int64_t> counts, std::size_t capacity, std::vector<int>& c,
              std::vector<int>& d, const char* which) const {
    if (counts.size() != static_cast<std::size_t>(size_))
      throw std::invalid_argument(std::string("MpiComm::alltoallv: ") + which + "_counts has " +
                                  std::to_string(counts.size()) + " entries, expected " +
                                  std::to_string(size_));
    c.resize(counts.size());
    d.resize(counts.size());
    std::int64_t off = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] < 0 || counts[r] > std::numeric_limits<int>::max() ||
          off > std::numeric_limits<int>::max())
        throw std::length_error(std::string("MpiComm::alltoallv: ") + which + " count " +
                                std::to_string(counts[r]) + " for rank " + std::to_string(r) +
                                " exceeds MPI's int counts");
      c[r] = static_cast<int>(counts[r]);
      d[r] = static_cast<int>(off);
      off += counts[r];
    }
    if (static_cast<std::size_t>(off) > capacity)
      throw std::invalid_argument(std::string("MpiComm::alltoallv: ") + which + " counts sum to " +
                                  std::to_string(off) + " elements, the buffer holds " +
                                  std::to_string(capacity));
  }
  static void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw std::runtime_error(std::string(what) +
                             " failed: " + std::string(msg, static_cast<std::size_t>(len)));
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

static_assert(Communicator<MpiComm>);

}  // namespace mpe::sharded
