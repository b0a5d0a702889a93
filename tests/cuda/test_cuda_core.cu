// SPDX-License-Identifier: Apache-2.0
// Core cases of CachedEmbedding on CudaBackend: forward/backward against a plain FP32
// embedding bag written in this file, validation errors (thrown, nothing changed), exact
// cache statistics, the store placements, streams, a user allocator, and EmbeddingRef in
// a user kernel.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "compare.hpp"

MPE_TEST_MATRIX(MPE_TEST_HOST_EXTERN, mpe::Fp32)

namespace {

using mpe::CudaBackend;
using Emb = mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding, CudaBackend>;

constexpr std::int32_t D = 3;

template <class T>
using DBuf = mpe::detail::Buffer<T, CudaBackend>;

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

mpe::EmbeddingConfig config(std::int64_t cache_rows) {
  mpe::EmbeddingConfig c;
  c.table_rows = {5, 4};
  c.dim = D;
  c.cache_rows = cache_rows;
  c.seed = 3;
  return c;
}

/// Initial weights: distinct values, exactly representable (multiples of 1/8).
std::vector<float> initial_weights() {
  std::vector<float> w(9 * D);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.125f * static_cast<float>(i) - 1.0f;
  return w;
}

/// Plain FP32 embedding bag: out (B, T*D), each bag summed in index order (weighted:
/// out += w * x), mean: times 1.0f / L. table_first: first global row of each table.
std::vector<float> reference_forward(const std::vector<float>& weights,
                                     const std::vector<std::int64_t>& indices,
                                     const std::vector<std::int64_t>& offsets, std::int64_t T, bool mean,
                                     const std::vector<float>& psw) {
  const std::vector<std::int64_t> table_first = {0, 5};
  const std::int64_t B = (static_cast<std::int64_t>(offsets.size()) - 1) / T;
  std::vector<float> out(static_cast<std::size_t>(B * T * D), 0.0f);
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t j = t * B + b;
      float* o = &out[static_cast<std::size_t>((b * T + t) * D)];
      for (std::int64_t i = offsets[j]; i < offsets[j + 1]; ++i) {
        const std::int64_t r = table_first[t] + indices[i];
        for (std::int32_t d = 0; d < D; ++d) {
          const float x = weights[static_cast<std::size_t>(r * D + d)];
          o[d] = o[d] + (psw.empty() ? x : psw[i] * x);
        }
      }
      const std::int64_t L = offsets[j + 1] - offsets[j];
      if (mean && L > 0) {
        const float inv = 1.0f / static_cast<float>(L);
        for (std::int32_t d = 0; d < D; ++d) o[d] = o[d] * inv;
      }
    }
  }
  return out;
}

/// Plain SGD on the reference: per row, g = sum over its occurrences in position order of
/// coef * grad_output (coef: per-sample weight, 1/L for mean, else 1); w -= lr * g.
void reference_sgd(std::vector<float>& weights, const std::vector<std::int64_t>& indices,
                   const std::vector<std::int64_t>& offsets, std::int64_t T, bool mean,
                   const std::vector<float>& psw, const std::vector<float>& grad, float lr) {
  const std::vector<std::int64_t> table_first = {0, 5};
  const std::int64_t B = (static_cast<std::int64_t>(offsets.size()) - 1) / T;
  std::vector<float> g(weights.size(), 0.0f);
  std::vector<bool> seen(weights.size() / D, false);
  for (std::int64_t j = 0; j < T * B; ++j) {
    const std::int64_t t = j / B, b = j % B;
    const std::int64_t L = offsets[j + 1] - offsets[j];
    for (std::int64_t i = offsets[j]; i < offsets[j + 1]; ++i) {
      const std::int64_t r = table_first[t] + indices[i];
      const float c = !psw.empty() ? psw[i] : mean ? 1.0f / static_cast<float>(L) : 1.0f;
      for (std::int32_t d = 0; d < D; ++d) {
        const float term = c * grad[static_cast<std::size_t>((b * T + t) * D + d)];
        float& acc = g[static_cast<std::size_t>(r * D + d)];
        acc = seen[static_cast<std::size_t>(r)] ? acc + term : term;
      }
      seen[static_cast<std::size_t>(r)] = true;
    }
  }
  for (std::size_t r = 0; r < seen.size(); ++r) {
    if (!seen[r]) continue;
    for (std::int32_t d = 0; d < D; ++d) weights[r * D + d] = weights[r * D + d] - lr * g[r * D + d];
  }
}

template <class T>
DBuf<T> dev(const CudaBackend& be, const std::vector<T>& v) {
  return mpe_test::to_backend(be, v);
}

std::vector<float> weights_of(const Emb& e) {
  std::vector<float> w(static_cast<std::size_t>(e.total_rows() * D));
  e.get_weights(w);
  return w;
}

void check_bits_equal(const std::vector<float>& got, const std::vector<float>& expect) {
  REQUIRE(got.size() == expect.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], ", expected ", expect[i]);
    CHECK(bits(got[i]) == bits(expect[i]));
  }
}

}  // namespace

TEST_CASE("CUDA forward and backward equal a plain FP32 embedding bag") {
  const CudaBackend be{};
  // T = 2, B = 3: duplicates within a bag and across bags, an empty bag.
  const std::vector<std::int64_t> indices = {0, 4, 4, 2, 1, 3, 3, 0};
  const std::vector<std::int64_t> offsets = {0, 3, 4, 4, 6, 7, 8};
  const std::vector<float> psw = {0.5f, 1.5f, -2.0f, 0.25f, 1.0f, 3.0f, -0.75f, 2.0f};
  std::vector<float> grad(3 * 2 * D);
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = 0.0625f * static_cast<float>(i) - 0.5f;
  for (std::int64_t cache_rows : {std::int64_t{8}, std::int64_t{0}}) {
    for (int mode = 0; mode < 3; ++mode) {  // sum, mean, weighted sum
      INFO("cache_rows = ", cache_rows, ", mode = ", mode);
      const bool mean = mode == 1;
      const std::vector<float> w = mode == 2 ? psw : std::vector<float>{};
      Emb e(config(cache_rows), be);
      std::vector<float> ref = initial_weights();
      e.set_weights(ref);
      auto di = dev(be, indices), doff = dev(be, offsets);
      auto dw = dev(be, w), dg = dev(be, grad);
      DBuf<float> out(be, grad.size());
      for (int step = 0; step < 3; ++step) {
        e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out.data(), out.size()},
                  mean ? mpe::Pooling::Mean : mpe::Pooling::Sum, {dw.data(), dw.size()});
        check_bits_equal(mpe_test::to_host(be, out.data(), out.size()),
                         reference_forward(ref, indices, offsets, 2, mean, w));
        e.backward({dg.data(), dg.size()}, mpe::Sgd{0.5f});
        reference_sgd(ref, indices, offsets, 2, mean, w, grad, 0.5f);
        check_bits_equal(weights_of(e), ref);
      }
      e.flush();
      check_bits_equal(weights_of(e), ref);  // Fp32 store: write-back is exact
    }
  }
}

TEST_CASE("CUDA validation errors throw std::invalid_argument and change nothing") {
  const CudaBackend be{};
  Emb e(config(8), be);
  e.set_weights(initial_weights());
  const std::vector<std::int64_t> good_idx = {0, 1, 2, 3};
  const std::vector<std::int64_t> good_off = {0, 2, 3, 4, 4};  // T = 2, B = 2
  auto di = dev(be, good_idx), doff = dev(be, good_off);
  DBuf<float> out(be, 2 * 2 * D);
  std::vector<float> g(2 * 2 * D, 0.25f);
  auto dg = dev(be, g);
  e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
  e.backward({dg.data(), dg.size()}, mpe::Sgd{0.5f});
  const std::vector<float> before = weights_of(e);
  const mpe::CacheStats stats_before = e.stats();
  const std::uint64_t step_before = e.step();

  auto expect_invalid = [&](auto&& call, const std::string& needle) {
    bool thrown = false;
    try {
      call();
    } catch (const std::invalid_argument& ex) {
      thrown = true;
      INFO("message: ", ex.what());
      CHECK(std::string(ex.what()).find(needle) != std::string::npos);
    }
    CHECK(thrown);
    check_bits_equal(weights_of(e), before);
    CHECK(e.stats().lookups == stats_before.lookups);
    CHECK(e.stats().misses == stats_before.misses);
    CHECK(e.step() == step_before);
  };
  SUBCASE("index outside its table") {
    // indices[3] = 4 would be a row of table 0 (5 rows) but lies in a bag of table 1 (4 rows).
    auto bad = dev(be, std::vector<std::int64_t>{0, 1, 2, 4});
    expect_invalid(
        [&] {
          e.forward({bad.data(), bad.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
        },
        "indices[3] = 4");
  }
  SUBCASE("negative index") {
    auto bad = dev(be, std::vector<std::int64_t>{0, -1, 2, 3});
    expect_invalid(
        [&] {
          e.forward({bad.data(), bad.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
        },
        "indices[1] = -1");
  }
  SUBCASE("decreasing offsets") {
    auto bad = dev(be, std::vector<std::int64_t>{0, 3, 2, 4, 4});
    expect_invalid(
        [&] {
          e.forward({di.data(), di.size()}, {bad.data(), bad.size()}, {out.data(), out.size()});
        },
        "offsets[2] = 2 < offsets[1] = 3");
  }
  SUBCASE("last offset not indices.size()") {
    auto bad = dev(be, std::vector<std::int64_t>{0, 2, 3, 4, 3});
    expect_invalid(
        [&] {
          e.forward({di.data(), di.size()}, {bad.data(), bad.size()}, {out.data(), out.size()});
        },
        "offsets[4] = 3");
  }
  SUBCASE("wrong output size") {
    DBuf<float> small(be, 5);
    expect_invalid(
        [&] {
          e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {small.data(), small.size()});
        },
        "output.size() = 5");
  }
  SUBCASE("non-finite per-sample weight") {
    auto w = dev(be, std::vector<float>{1.0f, 2.0f, std::numeric_limits<float>::infinity(), 1.0f});
    expect_invalid(
        [&] {
          e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out.data(), out.size()},
                    mpe::Pooling::Sum, {w.data(), w.size()});
        },
        "per_sample_weights[2]");
  }
  SUBCASE("non-finite gradient") {
    e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
    const std::vector<float> w_now = weights_of(e);
    std::vector<float> bad = g;
    bad[7] = std::numeric_limits<float>::quiet_NaN();
    auto db = dev(be, bad);
    bool thrown = false;
    try {
      e.backward({db.data(), db.size()}, mpe::Sgd{0.5f});
    } catch (const std::invalid_argument& ex) {
      thrown = true;
      CHECK(std::string(ex.what()).find("grad_output[7]") != std::string::npos);
    }
    CHECK(thrown);
    check_bits_equal(weights_of(e), w_now);
    CHECK(e.step() == step_before);
  }
  SUBCASE("set_weights value the store cannot hold") {
    std::vector<float> w(D, 1.0f);
    w[1] = std::numeric_limits<float>::infinity();
    expect_invalid([&] { e.set_weights(w, 2); }, "weights[1]");
  }
}

TEST_CASE("CUDA deferred validation: a failing call changes nothing, synchronize() throws once") {
  const CudaBackend be{};
  mpe::EmbeddingConfig cfg = config(8);
  cfg.validation = mpe::Validation::Deferred;
  Emb e(cfg, be);
  Emb twin(config(8), be);  // synchronous, never sees the bad calls
  e.set_weights(initial_weights());
  twin.set_weights(initial_weights());
  const std::vector<std::int64_t> good_off = {0, 2, 3, 4, 4};  // T = 2, B = 2
  auto di = dev(be, std::vector<std::int64_t>{0, 1, 2, 3}), doff = dev(be, good_off);
  auto bad = dev(be, std::vector<std::int64_t>{0, 1, 2, 4});  // indices[3] = 4: table 1 has 4 rows
  DBuf<float> out(be, 2 * 2 * D), out2(be, 2 * 2 * D);
  auto dg = dev(be, std::vector<float>(2 * 2 * D, 0.25f));
  const std::span<const float> g{dg.data(), dg.size()};
  e.forward({bad.data(), bad.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
  e.backward(g, mpe::Sgd{0.5f});  // gated off on the device: the forward failed
  for (int k = 0; k < 3; ++k) {
    e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
    twin.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out2.data(), out2.size()});
    check_bits_equal(mpe_test::to_host(be, out.data(), out.size()),
                     mpe_test::to_host(be, out2.data(), out2.size()));
    e.backward(g, mpe::Sgd{0.5f});
    twin.backward(g, mpe::Sgd{0.5f});
  }
  bool thrown = false;
  try {
    e.synchronize();
  } catch (const std::invalid_argument& ex) {
    thrown = true;
    INFO("message: ", ex.what());
    CHECK(std::string(ex.what()).find("forward (deferred, call 1): indices[3] = 4") != std::string::npos);
  }
  CHECK(thrown);
  CHECK_NOTHROW(e.synchronize());
  check_bits_equal(weights_of(e), weights_of(twin));
  CHECK(e.step() == twin.step());
  CHECK(e.stats().lookups == twin.stats().lookups);
  CHECK(e.stats().hits == twin.stats().hits);
}

TEST_CASE("CUDA cache statistics count hits, misses and fills exactly") {
  const CudaBackend be{};
  Emb e(config(8), be);  // 2 sets x 4 ways: 4 distinct rows always fit
  e.set_weights(initial_weights());
  // Global rows 1, 1 | 3 (table 0) and 6 | 8 (table 1): unique {1, 3, 6, 8}.
  const std::vector<std::int64_t> idx = {1, 1, 3, 1, 3};
  const std::vector<std::int64_t> off = {0, 2, 3, 4, 5};  // T = 2, B = 2
  auto di = dev(be, idx), doff = dev(be, off);
  DBuf<float> out(be, 2 * 2 * D);
  e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
  mpe::CacheStats s = e.stats();
  CHECK(s.lookups == 5);
  CHECK(s.unique_rows == 4);
  CHECK(s.hits == 0);
  CHECK(s.misses == 4);
  CHECK(s.conflict_misses == 0);
  CHECK(s.evictions == 0);
  CHECK(s.bytes_filled == 4 * 4 * D);  // 4 rows of Fp32 data (4D bytes)
  std::vector<float> g(2 * 2 * D, 1.0f);
  auto dg = dev(be, g);
  e.backward({dg.data(), dg.size()}, mpe::Sgd{0.5f});
  e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
  s = e.stats();
  CHECK(s.lookups == 10);
  CHECK(s.unique_rows == 8);
  CHECK(s.hits == 4);
  CHECK(s.misses == 4);
  e.flush();
  s = e.stats();
  CHECK(s.writebacks == 4);  // the 4 rows updated by backward were dirty
  CHECK(s.bytes_written_back == 4 * 4 * D);
}

namespace {
/// A user pool: counts live allocations, stream-ordered underneath.
class CountingPool : public mpe::CudaAllocator {
 public:
  std::int64_t live = 0, total = 0;
  void* allocate(std::size_t bytes, mpe::MemoryPurpose, cudaStream_t stream) override {
    void* p = nullptr;
    mpe::detail::cuda_check(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync");
    ++live;
    ++total;
    return p;
  }
  void deallocate(void* p, std::size_t, mpe::MemoryPurpose, cudaStream_t stream) noexcept override {
    cudaFreeAsync(p, stream);
    --live;
  }
};
}  // namespace

TEST_CASE("CUDA placements, a user stream and a user allocator give the host's bits") {
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  auto pool = std::make_shared<CountingPool>();
  struct Variant {
    const char* name;
    CudaBackend be;
  };
  const Variant variants[] = {
      {"managed store", CudaBackend{nullptr, 0, CudaBackend::Placement::Managed, nullptr}},
      {"host-mapped store", CudaBackend{nullptr, 0, CudaBackend::Placement::HostMapped, nullptr}},
      {"own stream", CudaBackend{stream, 0, CudaBackend::Placement::Device, nullptr}},
      {"user allocator", CudaBackend{stream, 0, CudaBackend::Placement::Device, pool}},
  };
  for (const Variant& v : variants) {
    INFO(v.name);
    for (const mpe_test::Scenario& sc :
         {mpe_test::Scenario{12, mpe_test::Opt::Adagrad, mpe_test::Mode::Weighted, true, 4},
          mpe_test::Scenario{12, mpe_test::Opt::Sgd, mpe_test::Mode::Mean, false, 4}}) {
      INFO(sc.label());
      const auto host =
          mpe_test::run_training<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>(mpe::HostBackend{}, sc);
      const auto d = mpe_test::run_training<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>(v.be, sc);
      mpe_test::check_same(host, d);
    }
  }
  CHECK(pool->total > 0);
  CHECK(pool->live == 0);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

namespace {
__global__ void read_through_ref(mpe::EmbeddingRef<mpe::Fp32> ref, std::int64_t rows, float* out) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const std::int64_t t = r < 5 ? 0 : 1;
  const std::int64_t local = r - (t == 0 ? 0 : 5);
  for (std::int32_t d = 0; d < ref.dim; ++d) out[r * ref.dim + d] = ref.element(t, local, d);
}
}  // namespace

TEST_CASE("EmbeddingRef reads in a user kernel what get_weights reads") {
  const CudaBackend be{};
  Emb e(config(8), be);
  e.set_weights(initial_weights());
  const std::vector<std::int64_t> idx = {1, 2, 0, 3};
  const std::vector<std::int64_t> off = {0, 2, 3, 4, 4};
  auto di = dev(be, idx), doff = dev(be, off);
  DBuf<float> out(be, 2 * 2 * D);
  std::vector<float> g(2 * 2 * D, 0.5f);
  auto dg = dev(be, g);
  e.forward({di.data(), di.size()}, {doff.data(), doff.size()}, {out.data(), out.size()});
  e.backward({dg.data(), dg.size()}, mpe::Sgd{0.25f});  // cached rows now differ from the store
  DBuf<float> rows(be, static_cast<std::size_t>(e.total_rows() * D));
  read_through_ref<<<1, 32>>>(e.ref(), e.total_rows(), rows.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  be.synchronize();
  check_bits_equal(mpe_test::to_host(be, rows.data(), rows.size()), weights_of(e));
}

namespace {
// Thread t writes a float at byte 16 t + t and a 16-bit value at byte 16 t + 8 + t (every
// alignment 0 .. 3), then reads both back through the device paths of num::load_*.
__global__ void unaligned_row_fields(std::uint8_t* buf, const float* f, const std::uint16_t* h, float* f_out,
                                     std::uint16_t* h_out) {
  const int t = static_cast<int>(threadIdx.x);
  mpe::num::store_f32(buf + 16 * t + t, f[t]);
  mpe::num::store_u16(buf + 16 * t + 8 + t, h[t]);
  __syncthreads();
  f_out[t] = mpe::num::load_f32(buf + 16 * t + t);
  h_out[t] = mpe::num::load_u16(buf + 16 * t + 8 + t);
}
}  // namespace

// Row formats keep f32/FP16 scales after the codes, at any byte offset when D is odd. nvcc
// 13 once merged an aligned 4-byte store and a memcpy fallback into one unguarded 4-byte
// store (a misaligned-address fault): the bytes must be memcpy's at every alignment.
TEST_CASE("num::store_f32 / load_f32 / store_u16 / load_u16 at every byte alignment on the device") {
  const CudaBackend be{};
  const std::vector<float> f = {1.5f, -0.0f, 3.0e-39f, -65504.25f};
  const std::vector<std::uint16_t> h = {0x3c00, 0x8001, 0x7bff, 0xfc00};
  DBuf<std::uint8_t> buf(be, 64);
  be.fill_bytes(buf.data(), 0, 64);
  auto df = dev(be, f);
  auto dh = dev(be, h);
  DBuf<float> f_out(be, 4);
  DBuf<std::uint16_t> h_out(be, 4);
  unaligned_row_fields<<<1, 4>>>(buf.data(), df.data(), dh.data(), f_out.data(), h_out.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  be.synchronize();
  std::vector<std::uint8_t> want(64, 0);
  for (int t = 0; t < 4; ++t) {
    std::memcpy(want.data() + 16 * t + t, &f[static_cast<std::size_t>(t)], 4);
    std::memcpy(want.data() + 16 * t + 8 + t, &h[static_cast<std::size_t>(t)], 2);
  }
  CHECK(mpe_test::to_host(be, buf.data(), 64) == want);  // neighbouring bytes untouched
  const std::vector<float> fo = mpe_test::to_host(be, f_out.data(), 4);
  const std::vector<std::uint16_t> ho = mpe_test::to_host(be, h_out.data(), 4);
  for (std::size_t t = 0; t < 4; ++t) {
    CAPTURE(t);
    CHECK(bits(fo[t]) == bits(f[t]));
    CHECK(ho[t] == h[t]);
  }
}
