// SPDX-License-Identifier: Apache-2.0
// Sharded training step under mpirun -np N: step time (forward + backward of the sharded
// embedding, median over steps, wall clock of rank 0 after a barrier) and the all-to-all
// bytes per step (every rank's bytes sent to other ranks, summed; indices vs vectors),
// with memory per rank. Plain timing binary (MPI_Wtime); one line of JSON per run on rank 0.
//
//   mpirun -np 3 sharded_step --plan table --global-batch 3072 --dim 64 --steps 30
//
// Workload: the 26 Criteo-Kaggle cardinalities x --scale (default 0.01: 337,640 rows),
// --pooling L indices per bag (default 1, Criteo's one-hot), ids Zipf-like (u^3 * rows),
// global batch split evenly over the ranks, Int8Rowwise store + 5 % LRU cache, stochastic
// rounding, RowwiseAdagrad. One rank per core is assumed: OMP_NUM_THREADS=1.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mpe/mpe.hpp>
#include <mpe/sharded/mpi_comm.hpp>
#include <mpe/sharded/sharded_embedding.hpp>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t kKaggle[26] = {1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
                                      93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
                                      2173,  4,    7046547,  18,      15,  286181, 105,     142572};

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Args {
  std::string plan = "table", precision = "fp32";
  std::int64_t global_batch = 2048;
  int dim = 64, steps = 30, warmup = 3, pooling = 1;
  double scale = 0.01;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--plan")
      a.plan = v;
    else if (k == "--precision")
      a.precision = v;
    else if (k == "--global-batch")
      a.global_batch = std::atoll(v.c_str());
    else if (k == "--dim")
      a.dim = std::atoi(v.c_str());
    else if (k == "--steps")
      a.steps = std::atoi(v.c_str());
    else if (k == "--warmup")
      a.warmup = std::atoi(v.c_str());
    else if (k == "--pooling")
      a.pooling = std::atoi(v.c_str());
    else if (k == "--scale")
      a.scale = std::atof(v.c_str());
    else
      throw std::invalid_argument("unknown option " + k);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    const Args a = parse(argc, argv);
    mpe::sharded::MpiComm comm(MPI_COMM_WORLD);
    const int N = comm.size(), me = comm.rank();
    mpe::EmbeddingConfig cfg;
    for (auto c : kKaggle)
      cfg.table_rows.push_back(std::max<std::int64_t>(2, std::llround(static_cast<double>(c) * a.scale)));
    cfg.dim = a.dim;
    std::int64_t total = 0;
    for (auto r : cfg.table_rows) total += r;
    cfg.cache_rows = std::max<std::int64_t>(32, total / 20);
    cfg.seed = 1;
    using Store = mpe::Int8Rowwise;
    const mpe::sharded::ShardingPlan plan = mpe::sharded::plan_by_name(a.plan, cfg.table_rows, cfg.dim, N);
    mpe::sharded::ShardOptions opt;
    opt.precision = mpe::sharded::comm_precision_from_string(a.precision);
    mpe::sharded::ShardedEmbedding<Store, mpe::Lru<32>, mpe::StochasticRounding, mpe::sharded::MpiComm> sh(
        cfg, plan, comm, opt);
    sh.init_uniform(-0.05f, 0.05f);
    const std::int64_t T = static_cast<std::int64_t>(cfg.table_rows.size());
    const std::int64_t lo = a.global_batch * me / N, hi = a.global_batch * (me + 1) / N, B = hi - lo;
    std::vector<double> times;
    std::vector<float> out(static_cast<std::size_t>(B * T * a.dim)), grad(out.size());
    for (std::size_t i = 0; i < grad.size(); ++i)
      grad[i] = 1e-3f * static_cast<float>(static_cast<int>(mix(i) % 201) - 100);
    for (int s = 0; s < a.warmup + a.steps; ++s) {
      if (s == a.warmup) sh.reset_stats();
      std::vector<std::int64_t> idx, off{0};
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t b = lo; b < hi; ++b) {
          for (int l = 0; l < a.pooling; ++l) {
            const std::uint64_t h =
                mix(static_cast<std::uint64_t>(s) << 40 ^ static_cast<std::uint64_t>(t) << 32 ^
                    static_cast<std::uint64_t>(b * a.pooling + l));
            const double u = static_cast<double>(h >> 11) * 0x1p-53;
            idx.push_back(std::min<std::int64_t>(
                cfg.table_rows[static_cast<std::size_t>(t)] - 1,
                static_cast<std::int64_t>(u * u * u *
                                          static_cast<double>(cfg.table_rows[static_cast<std::size_t>(t)]))));
          }
          off.push_back(static_cast<std::int64_t>(idx.size()));
        }
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      sh.forward(idx, off, out);
      sh.backward(grad, mpe::RowwiseAdagrad{0.01f});
      MPI_Barrier(MPI_COMM_WORLD);
      if (s >= a.warmup) times.push_back(MPI_Wtime() - t0);
    }
    std::sort(times.begin(), times.end());
    const auto cs = sh.comm_stats();
    std::vector<std::uint64_t> bytes{cs.index_bytes, cs.vector_bytes};
    comm.allreduce_sum(std::span<std::uint64_t>(bytes));
    const auto mem = sh.memory_per_rank();
    std::size_t mem_max = 0, mem_sum = 0;
    for (const auto& m : mem) {
      mem_max = std::max(mem_max, m.embedding_bytes() + m.optimizer_bytes);
      mem_sum += m.embedding_bytes() + m.optimizer_bytes;
    }
    if (me == 0)
      std::printf(
          "{\"ranks\": %d, \"plan\": \"%s\", \"precision\": \"%s\", \"global_batch\": %lld, \"dim\": %d, "
          "\"pooling\": %d, "
          "\"rows\": %lld, \"steps\": %d, \"step_ms_median\": %.3f, \"step_ms_min\": %.3f, "
          "\"a2a_index_bytes_per_step\": %.0f, \"a2a_vector_bytes_per_step\": %.0f, "
          "\"memory_per_rank_max\": %zu, \"memory_all_ranks\": %zu}\n",
          N, a.plan.c_str(), a.precision.c_str(), static_cast<long long>(a.global_batch), a.dim, a.pooling,
          static_cast<long long>(total), a.steps, 1e3 * times[times.size() / 2], 1e3 * times.front(),
          static_cast<double>(bytes[0]) / a.steps, static_cast<double>(bytes[1]) / a.steps, mem_max, mem_sum);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
