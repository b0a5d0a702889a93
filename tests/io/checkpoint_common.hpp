// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the checkpoint tests: deterministic batches, a training step, and a
// snapshot of the whole state for "unchanged" / "identical" checks.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "io/state_image.hpp"
#include "reference/policy_lists.hpp"

namespace ckt {

/// One Storage x Cache x Rounding combination of the checkpoint matrix.
template <class S, class C, class R>
struct Combo {
  using Embedding = mpe::CachedEmbedding<S, C, R>;
};
/// Combo<S, C, R> for each storage S given, every cache policy and both roundings of the
/// one test list (tests/reference/policy_lists.hpp), for TEST_CASE_TEMPLATE_APPLY.
template <class... S>
using combos_t = mpe_test::product_t<Combo, std::tuple<S...>, mpe_test::Caches, mpe_test::Roundings>;

inline std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("mpe_ckpt_test_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline std::vector<std::uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const std::filesystem::path& p, const std::vector<std::uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// One batch: CSR indices/offsets for T tables, B bags, Zipf-like skew so the cache both
/// hits and misses; the output gradient is a fixed function of the batch number.
struct Batch {
  std::vector<std::int64_t> indices, offsets;
  std::vector<float> grad;
};

inline Batch make_batch(const mpe::EmbeddingConfig& c, std::int64_t B, std::uint64_t k) {
  std::mt19937_64 g(1000 + k);
  Batch b;
  const auto T = static_cast<std::int64_t>(c.table_rows.size());
  b.offsets.push_back(0);
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < B; ++i) {
      const int L = static_cast<int>(g() % 4);
      for (int l = 0; l < L; ++l) {
        const auto rows = static_cast<std::uint64_t>(c.table_rows[static_cast<std::size_t>(t)]);
        const std::uint64_t u = g() % rows;
        b.indices.push_back(static_cast<std::int64_t>((g() & 1) ? u % (1 + rows / 4) : u));  // skewed
      }
      b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
    }
  }
  b.grad.resize(static_cast<std::size_t>(B * T * c.dim));
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (auto& x : b.grad) x = u(g);
  return b;
}

/// Step k: forward (every third step after a prefetch of the same batch) and backward.
template <class E, class Opt>
void train_step(E& e, std::uint64_t k, const Opt& opt, std::int64_t B = 6) {
  const Batch b = make_batch(e.config(), B, k);
  std::vector<float> out(b.grad.size());
  if (k % 3 == 0) e.prefetch(b.indices, b.offsets);
  e.forward(b.indices, b.offsets, out, mpe::Pooling::Sum);
  e.backward(b.grad, opt);
}

/// Everything save() writes, read through the state interface (CachedEmbedding::state(),
/// copied to host memory): the checkpoint header, then every section's bytes (the store in
/// state form, the pending batch's payload), without framing: equal for equal states only.
template <class E>
std::vector<std::uint8_t> snapshot(const E& e) {
  const mpe::TableState state = e.state();
  std::vector<std::uint8_t> s = mpe::detail::ckpt::header(e, state).v;
  const StateImage m = StateImage::of(e);
  const auto add = [&](const auto& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
    s.insert(s.end(), p, p + v.size() * sizeof(v[0]));
  };
  add(m.store);
  add(m.cache_rows);
  add(m.tags);
  add(m.last_use);
  add(m.dirty);
  add(m.policy_words);
  add(m.optimizer_state);
  add(mpe::detail::ckpt::pending_batch(e, state));
  // FP32 optimizer state of the cached rows (compact state precisions; empty otherwise)
  add(m.cached_optimizer_state);
  return s;
}

template <class E>
std::vector<float> weights(const E& e) {
  std::vector<float> w(static_cast<std::size_t>(e.total_rows() * e.dim()));
  e.get_weights(w);
  return w;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline bool same_stats(const mpe::CacheStats& a, const mpe::CacheStats& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

inline mpe::EmbeddingConfig small_config(std::uint64_t seed = 7) {
  mpe::EmbeddingConfig c;
  c.table_rows = {40, 23, 9};
  c.dim = 5;
  c.cache_rows = 16;
  c.seed = seed;
  return c;
}

/// Round trip and exact resume for one policy combination: train 10 steps, save, load
/// into a fresh object built with another seed, then 20 more steps on both must give the
/// same bits (weights, stats, and the whole saved state) as the run that never stopped.
template <class E>
void check_resume(const std::filesystem::path& dir) {
  const mpe::EmbeddingConfig c = small_config(7);
  const mpe::RowwiseAdagrad opt{0.05f};
  E a(c);
  a.init_uniform(-0.5f, 0.5f);
  for (std::uint64_t k = 0; k < 10; ++k) train_step(a, k, opt);
  const auto path = dir / "resume.ckpt";
  a.save(path);
  mpe::EmbeddingConfig other = c;
  other.seed = 12345;  // load() adopts the file's seed
  E b(other);
  b.load(path);
  CHECK(b.config().seed == c.seed);
  CHECK(b.step() == a.step());
  CHECK(same_bits(weights(a), weights(b)));
  CHECK(same_stats(a.stats(), b.stats()));
  CHECK(snapshot(a) == snapshot(b));
  for (std::uint64_t k = 10; k < 30; ++k) {
    train_step(a, k, opt);
    train_step(b, k, opt);
  }
  CHECK(b.step() == 30);
  CHECK(same_bits(weights(a), weights(b)));
  CHECK(same_stats(a.stats(), b.stats()));
  CHECK(snapshot(a) == snapshot(b));
  // The run changed the state (otherwise the comparison above proves little).
  E fresh(c);
  fresh.load(path);
  CHECK_FALSE(same_bits(weights(fresh), weights(a)));
}

/// Step k of the pipelined loop (docs/checkpoint_format.md): forward(k), prefetch(k + 1), backward(k).
/// Returns forward's output, so that runs can be compared call by call.
template <class E, class Opt>
std::vector<float> pipelined_step(E& e, std::uint64_t k, const Opt& opt, std::int64_t B = 6) {
  const Batch b = make_batch(e.config(), B, k);
  const Batch next = make_batch(e.config(), B, k + 1);
  std::vector<float> out(b.grad.size());
  e.forward(b.indices, b.offsets, out, mpe::Pooling::Sum);
  e.prefetch(next.indices, next.offsets);
  e.backward(b.grad, opt);
  return out;
}

/// Exact resume with a prefetch pending at the save (the pipelined loop of docs/checkpoint_format.md always
/// has one): 10 pipelined steps, save, load into a fresh object, then 20 more steps on
/// both give the same outputs at every step, and the same weights, stats and saved state,
/// as the run that never stopped.
template <class E>
void check_resume_pipelined(const std::filesystem::path& dir,
                            mpe::Validation validation = mpe::Validation::Synchronous) {
  mpe::EmbeddingConfig c = small_config(7);
  c.validation = validation;
  const mpe::RowwiseAdagrad opt{0.05f};
  E a(c);
  a.init_uniform(-0.5f, 0.5f);
  const Batch first = make_batch(c, 6, 0);
  a.prefetch(first.indices, first.offsets);
  for (std::uint64_t k = 0; k < 10; ++k) pipelined_step(a, k, opt);
  const auto path = dir / "pipelined.ckpt";
  a.save(path);  // the prefetch of batch 10 is pending
  mpe::EmbeddingConfig other = c;
  other.seed = 12345;
  E b(other);
  b.load(path);
  CHECK(same_stats(a.stats(), b.stats()));
  CHECK(snapshot(a) == snapshot(b));
  CHECK_FALSE(b.state().pending_offsets.empty());
  bool outputs_equal = true;
  for (std::uint64_t k = 10; k < 30; ++k) {
    outputs_equal = same_bits(pipelined_step(a, k, opt), pipelined_step(b, k, opt)) && outputs_equal;
  }
  CHECK(outputs_equal);
  CHECK(b.step() == 30);
  CHECK(same_bits(weights(a), weights(b)));
  CHECK(same_stats(a.stats(), b.stats()));
  CHECK(snapshot(a) == snapshot(b));
}

}  // namespace ckt
