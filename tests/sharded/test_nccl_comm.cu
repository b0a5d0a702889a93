// SPDX-License-Identifier: Apache-2.0
// NcclComm on one rank (one GPU; NCCL allows one rank per GPU): the device all-to-all,
// the host-span collectives, and ShardedEmbedding over NcclComm against one
// CachedEmbedding (20 SGD steps, bit for bit). Built by nvcc; without a GPU the binary
// prints "MPE_CUDA_SKIP: ..." and CTest reports it skipped. Multi-GPU runs use the same
// code under mpirun with one rank per GPU (ncclCommInitRank with an id broadcast by MPI).
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <mpe/mpe.hpp>
#include <mpe/sharded/nccl_comm.hpp>
#include <mpe/sharded/sharded_embedding.hpp>
#include <vector>

namespace {

struct OneRank {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  OneRank() {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
    REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  }
  ~OneRank() {
    ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }
};

}  // namespace

TEST_CASE("NcclComm: device and host all-to-all, allreduce, broadcast on one rank") {
  OneRank r;
  mpe::sharded::NcclComm c(r.comm, r.stream, 0);
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  std::vector<float> send{1.5f, -2.0f, 3.25f}, recv(3);
  const std::vector<std::int64_t> counts{3};
  c.alltoallv(std::span<const float>(send), std::span<const std::int64_t>(counts), std::span<float>(recv),
              std::span<const std::int64_t>(counts));
  CHECK(recv == send);
  float *ds = nullptr, *dr = nullptr;
  REQUIRE(cudaMalloc(&ds, 3 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&dr, 3 * sizeof(float)) == cudaSuccess);
  cudaMemcpy(ds, send.data(), 3 * sizeof(float), cudaMemcpyHostToDevice);
  c.alltoallv_device(ds, std::span<const std::int64_t>(counts), dr, std::span<const std::int64_t>(counts));
  cudaStreamSynchronize(r.stream);
  std::vector<float> back(3);
  cudaMemcpy(back.data(), dr, 3 * sizeof(float), cudaMemcpyDeviceToHost);
  CHECK(back == send);
  cudaFree(ds);
  cudaFree(dr);
  std::vector<std::int64_t> mx{4, -7};
  c.allreduce_max(std::span<std::int64_t>(mx));
  CHECK(mx == std::vector<std::int64_t>{4, -7});
  std::vector<std::uint64_t> sm{5, 9};
  c.allreduce_sum(std::span<std::uint64_t>(sm));
  CHECK(sm == std::vector<std::uint64_t>{5, 9});
  std::vector<char> bytes{'o', 'k'};
  c.broadcast(std::span<char>(bytes), 0);
  CHECK(bytes[1] == 'k');
}

TEST_CASE("ShardedEmbedding over NcclComm equals one CachedEmbedding (one rank, SGD, 20 steps)") {
  OneRank r;
  mpe::sharded::NcclComm c(r.comm, r.stream, 0);
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {50, 30};
  cfg.dim = 8;
  cfg.cache_rows = 16;
  cfg.seed = 3;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding> one(cfg);
  mpe::sharded::ShardedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding, mpe::sharded::NcclComm> sh(
      cfg, mpe::sharded::auto_plan(cfg.table_rows, cfg.dim, 1), c);
  one.init_uniform(-0.1f, 0.1f);
  sh.init_uniform(-0.1f, 0.1f);
  const std::int64_t B = 4;
  for (int k = 0; k < 20; ++k) {
    std::vector<std::int64_t> idx, off{0};
    for (std::int64_t j = 0; j < 2 * B; ++j) {
      for (int l = 0; l < (k + j) % 4; ++l) idx.push_back((k * 7 + j * 3 + l * 11) % (j < B ? 50 : 30));
      off.push_back(static_cast<std::int64_t>(idx.size()));
    }
    std::vector<float> o1(B * 16), o2(B * 16), g(B * 16);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>((i * 37 + k) % 17) - 0.08f;
    one.forward(idx, off, o1);
    sh.forward(idx, off, o2);
    CHECK(std::memcmp(o1.data(), o2.data(), o1.size() * 4) == 0);
    one.backward(g, mpe::Sgd{0.5f});
    sh.backward(g, mpe::Sgd{0.5f});
  }
  std::vector<float> w1(80 * 8), w2(w1.size());
  one.get_weights(w1);
  sh.get_weights(w2);
  CHECK(std::memcmp(w1.data(), w2.data(), w1.size() * 4) == 0);
}

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    std::printf("MPE_CUDA_SKIP: no usable CUDA device (cudaGetDeviceCount: %s); %s skipped\n",
                cudaGetErrorName(e), argc > 0 ? argv[0] : "test");
    return 0;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
