// SPDX-License-Identifier: Apache-2.0
// Row quantize (Storage::store<Rounding>) and dequantize (Storage::Reader) throughput per
// format, single thread, host. Bytes/s counts FP32 input (quantize) or FP32 output
// (dequantize) bytes, 4 * D per row; items/s = rows/s. BM_StoreRow times the host's row
// store as training calls it (detail::store_row: write-backs, flushes, store updates) on
// each path, the second argument: 0 the portable code, 1 AVX2, 2 AVX-512 (INT8, INT4 and
// INT2 have both); a path the CPU lacks is skipped.
//   ./bench_quantize                      (short default run)
//   ./bench_quantize --benchmark_filter=Int4 --benchmark_min_time=1
//   ./bench_quantize --benchmark_filter=BM_StoreRow
#include <benchmark/benchmark.h>

#include <cstdint>
#include <mpe/detail/host/dispatch.hpp>
#include <mpe/numeric/philox.hpp>
#include <mpe/storage/all.hpp>
#include <random>
#include <vector>

namespace {

constexpr int kRows = 1024;

struct Table {
  std::vector<float> x;
  std::vector<std::uint8_t> store;
  std::size_t stride;
};

template <class S>
Table make_table(int D) {
  Table t;
  t.stride = mpe::row_bytes<S>(D, 4);
  t.x.resize(static_cast<std::size_t>(kRows) * D);
  t.store.resize(kRows * t.stride);
  std::mt19937 gen(1);
  std::normal_distribution<float> n(0.0f, 0.05f);
  for (auto& v : t.x) v = n(gen);
  for (int r = 0; r < kRows; ++r) {
    S::template store<mpe::NearestRounding>(t.x.data() + static_cast<std::size_t>(r) * D, D,
                                            t.store.data() + r * t.stride, {});
  }
  return t;
}

template <class S, class R>
void BM_Quantize(benchmark::State& state) {
  const int D = static_cast<int>(state.range(0));
  Table t = make_table<S>(D);
  std::uint32_t step = 0;
  for (auto _ : state) {
    for (int r = 0; r < kRows; ++r) {
      const mpe::num::RowRng rng{7, static_cast<std::uint64_t>(r), step, mpe::num::RoundingSite::StoreUpdate};
      S::template store<R>(t.x.data() + static_cast<std::size_t>(r) * D, D, t.store.data() + r * t.stride,
                           rng);
    }
    ++step;
    benchmark::DoNotOptimize(t.store.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows);
  state.SetBytesProcessed(state.iterations() * kRows * D * static_cast<std::int64_t>(sizeof(float)));
  state.counters["store_bytes_per_row"] = static_cast<double>(t.stride);
}

template <class S>
void BM_Dequantize(benchmark::State& state) {
  const int D = static_cast<int>(state.range(0));
  Table t = make_table<S>(D);
  std::vector<float> out(static_cast<std::size_t>(D));
  for (auto _ : state) {
    for (int r = 0; r < kRows; ++r) {
      const typename S::Reader rd(t.store.data() + r * t.stride, D);
      for (int d = 0; d < D; ++d) out[static_cast<std::size_t>(d)] = rd[d];
      benchmark::DoNotOptimize(out.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows);
  state.SetBytesProcessed(state.iterations() * kRows * D * static_cast<std::int64_t>(sizeof(float)));
  state.counters["store_bytes_per_row"] = static_cast<double>(t.stride);
}

template <class S, class R>
void BM_StoreRow(benchmark::State& state) {
  const int D = static_cast<int>(state.range(0));
  const auto path = state.range(1);
#if MPE_HOST_SIMD
  if ((path >= 1 && !mpe::detail::cpu_has_avx2_f16c()) || (path == 2 && !mpe::detail::cpu_has_avx512())) {
    state.SkipWithError("the CPU lacks this path");
    return;
  }
  const bool simd_was = mpe::detail::set_host_simd(path >= 1);
  const bool avx512_was = mpe::detail::set_host_avx512(path == 2);
#else
  if (path != 0) {
    state.SkipWithError("a build without the host SIMD paths");
    return;
  }
#endif
  Table t = make_table<S>(D);
  std::uint32_t step = 0;
  for (auto _ : state) {
    for (int r = 0; r < kRows; ++r) {
      const mpe::num::RowRng rng{7, static_cast<std::uint64_t>(r), step, mpe::num::RoundingSite::StoreUpdate};
      mpe::detail::store_row<S, R>(t.x.data() + static_cast<std::size_t>(r) * D, D,
                                   t.store.data() + r * t.stride, rng);
    }
    ++step;
    benchmark::DoNotOptimize(t.store.data());
    benchmark::ClobberMemory();
  }
#if MPE_HOST_SIMD
  mpe::detail::set_host_simd(simd_was);
  mpe::detail::set_host_avx512(avx512_was);
#endif
  state.SetItemsProcessed(state.iterations() * kRows);
  state.SetBytesProcessed(state.iterations() * kRows * D * static_cast<std::int64_t>(sizeof(float)));
}

#define MPE_BENCH_FORMAT(S)                                                                      \
  BENCHMARK_TEMPLATE(BM_Quantize, S, mpe::NearestRounding)->Arg(64)->Arg(128)->MinTime(0.05);    \
  BENCHMARK_TEMPLATE(BM_Quantize, S, mpe::StochasticRounding)->Arg(64)->Arg(128)->MinTime(0.05); \
  BENCHMARK_TEMPLATE(BM_Dequantize, S)->Arg(64)->Arg(128)->MinTime(0.05);

MPE_BENCH_FORMAT(mpe::Fp32)
MPE_BENCH_FORMAT(mpe::Fp16)
MPE_BENCH_FORMAT(mpe::Bf16)
MPE_BENCH_FORMAT(mpe::Int8Rowwise)
MPE_BENCH_FORMAT(mpe::Int4Rowwise)

BENCHMARK_TEMPLATE(BM_StoreRow, mpe::Int8Rowwise, mpe::StochasticRounding)
    ->ArgsProduct({{64, 128}, {0, 1, 2}})
    ->MinTime(0.05);
BENCHMARK_TEMPLATE(BM_StoreRow, mpe::Int8Rowwise, mpe::NearestRounding)
    ->ArgsProduct({{64}, {0, 1, 2}})
    ->MinTime(0.05);
BENCHMARK_TEMPLATE(BM_StoreRow, mpe::Int4Rowwise, mpe::StochasticRounding)
    ->ArgsProduct({{64}, {0, 1, 2}})
    ->MinTime(0.05);
BENCHMARK_TEMPLATE(BM_StoreRow, mpe::Int2Rowwise, mpe::StochasticRounding)
    ->ArgsProduct({{64}, {0, 1, 2}})
    ->MinTime(0.05);

}  // namespace

BENCHMARK_MAIN();
