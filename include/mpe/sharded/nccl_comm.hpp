// SPDX-License-Identifier: Apache-2.0
/// @file mpe/sharded/nccl_comm.hpp
/// @brief `mpe::sharded::NcclComm`: the Communicator on NCCL (grouped ncclSend/ncclRecv,
/// ncclAllReduce, ncclBroadcast) on a CUDA stream (a CudaBackend's). Needs <nccl.h> and the
/// CUDA runtime (the CUDA toolkit ships both); link libnccl and cudart.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mpe/sharded/comm.hpp"

namespace mpe::sharded {

/// Communicator on an NCCL communicator the caller owns (ncclCommInitRank before, ncclCommDestroy
/// after; one rank per GPU, as NCCL requires). Every operation is queued on `stream` of
/// `device`.
///
/// Two interfaces:
/// - `alltoallv_device(send, send_counts, recv, recv_counts)`: device pointers, counts in
///   elements on the host; one ncclGroupStart/End of ncclSend/ncclRecv per peer with a
///   non-zero count. Queued on the stream, does not wait.
/// - the Communicator members (host spans, what ShardedEmbedding calls): the data are
///   copied to a device staging buffer on the stream, moved by the same NCCL calls, copied
///   back, and the stream is synchronized before returning.
///
/// Errors: CUDA or NCCL failures throw std::runtime_error naming the call
/// (cudaGetErrorString / ncclGetErrorString).
class NcclComm {
 public:
  /// Wraps `comm` (the caller's; not destroyed here) for operations queued on `stream` of
  /// CUDA device `device`, and reads its rank and size (ncclCommUserRank, ncclCommCount;
  /// std::runtime_error on failure). Allocates nothing: the device staging buffer of the
  /// host-span members is allocated on first use, grown as needed, freed by the destructor.
  NcclComm(ncclComm_t comm, cudaStream_t stream, int device = 0)
      : comm_(comm), stream_(stream), device_(device) {
    nccl(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    nccl(ncclCommCount(comm_, &size_), "ncclCommCount");
  }
  /// On a CudaBackend's stream and device (any type with `stream` and `device` members).
  template <class Backend>
  requires requires(const Backend& b) {
    b.stream;
    b.device;
  }
  NcclComm(ncclComm_t comm, const Backend& backend) : NcclComm(comm, backend.stream, backend.device) {}
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() {
    if (staging_) cudaFree(staging_);
  }

  /// This process's rank in [0, size()) (read at construction; no communication).
  int rank() const { return rank_; }
  /// Number of ranks of the communicator (read at construction).
  int size() const { return size_; }
  /// The wrapped NCCL communicator (still the caller's).
  ncclComm_t handle() const { return comm_; }
  /// The stream every operation is queued on.
  cudaStream_t stream() const { return stream_; }

  /// Device-memory all-to-all (see the class comment). Queued; does not wait.
  template <class T>
  void alltoallv_device(const T* send, std::span<const std::int64_t> send_counts, T* recv,
                        std::span<const std::int64_t> recv_counts) {
    check_counts(send_counts);
    check_counts(recv_counts);
    nccl(ncclGroupStart(), "ncclGroupStart");
    std::size_t so = 0, ro = 0;
    for (int r = 0; r < size_; ++r) {
      const auto sc = static_cast<std::size_t>(send_counts[static_cast<std::size_t>(r)]);
      const auto rc = static_cast<std::size_t>(recv_counts[static_cast<std::size_t>(r)]);
      if (sc) nccl(ncclSend(send + so, sc * sizeof(T), ncclUint8, r, comm_, stream_), "ncclSend");
      if (rc) nccl(ncclRecv(recv + ro, rc * sizeof(T), ncclUint8, r, comm_, stream_), "ncclRecv");
      so += sc;
      ro += rc;
    }
    nccl(ncclGroupEnd(), "ncclGroupEnd");
  }

  /// Host-span all-to-all through device staging (synchronous).
  template <class T>
  void alltoallv(std::span<const T> send, std::span<const std::int64_t> send_counts, std::span<T> recv,
                 std::span<const std::int64_t> recv_counts) {
    const std::size_t sbytes = send.size_bytes(), rbytes = recv.size_bytes();
    char* d = stage(sbytes + rbytes);
    cuda(cudaMemcpyAsync(d, send.data(), sbytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    alltoallv_device(reinterpret_cast<const T*>(d), send_counts, reinterpret_cast<T*>(d + align(sbytes)),
                     recv_counts);
    cuda(cudaMemcpyAsync(recv.data(), d + align(sbytes), rbytes, cudaMemcpyDeviceToHost, stream_),
         "cudaMemcpyAsync");
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  /// Element-wise maximum over all ranks, in place: `v` (host, same size on every rank)
  /// goes through device staging and ncclAllReduce (ncclMax); waits for the stream.
  void allreduce_max(std::span<std::int64_t> v) { reduce(v, ncclInt64, ncclMax); }
  /// Element-wise sum over all ranks, in place (ncclAllReduce, ncclSum; unsigned integers
  /// wrap modulo 2^64, so the result does not depend on the order). Host span through
  /// device staging; waits for the stream.
  void allreduce_sum(std::span<std::uint64_t> v) { reduce(v, ncclUint64, ncclSum); }
  /// Copies rank `root`'s `bytes` (host, same size on every rank) into every rank's
  /// `bytes`, in place, through device staging and ncclBroadcast; waits for the stream.
  void broadcast(std::span<char> bytes, int root) {
    char* d = stage(bytes.size());
    cuda(cudaMemcpyAsync(d, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    nccl(ncclBroadcast(d, d, bytes.size(), ncclChar, root, comm_, stream_), "ncclBroadcast");
    cuda(cudaMemcpyAsync(bytes.data(), d, bytes.size(), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  static std::size_t align(std::size_t n) { return (n + 255) / 256 * 256; }
  template <class T>
  void reduce(std::span<T> v, ncclDataType_t type, ncclRedOp_t op) {
    char* d = stage(v.size_bytes());
    cuda(cudaMemcpyAsync(d, v.data(), v.size_bytes(), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    nccl(ncclAllReduce(d, d, v.size(), type, op, comm_, stream_), "ncclAllReduce");
    cuda(cudaMemcpyAsync(v.data(), d, v.size_bytes(), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  char* stage(std::size_t bytes) {
    bytes = align(bytes) + 256;
    if (bytes > staging_bytes_) {
      int previous = 0;  // the caller's current device, restored on the way out
      cuda(cudaGetDevice(&previous), "cudaGetDevice");
      struct Restore {
        int device;
        ~Restore() { cudaSetDevice(device); }
      } restore{previous};
      cuda(cudaSetDevice(device_), "cudaSetDevice");
      cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      if (staging_) cudaFree(staging_);
      staging_ = nullptr;
      staging_bytes_ = 0;
      cuda(cudaMalloc(&staging_, bytes), "cudaMalloc");
      staging_bytes_ = bytes;
    }
    return static_cast<char*>(staging_);
  }
  void check_counts(std::span<const std::int64_t> c) const {
    if (c.size() != static_cast<std::size_t>(size_))
      throw std::invalid_argument("NcclComm::alltoallv: counts have " + std::to_string(c.size()) +
                                  " entries, expected " + std::to_string(size_));
    for (auto x : c)
      if (x < 0) throw std::invalid_argument("NcclComm::alltoallv: negative count " + std::to_string(x));
  }
  static void nccl(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(r));
  }
  static void cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e) + ": " +
                               cudaGetErrorString(e));
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_ = 0;
  int rank_ = 0, size_ = 1;
  void* staging_ = nullptr;
  std::size_t staging_bytes_ = 0;
};

static_assert(Communicator<NcclComm>);

}  // namespace mpe::sharded
