// SPDX-License-Identifier: Apache-2.0
// The README's example compiles and runs (CUB's example-begin/end habit): the code between
// the markers below is README.md's ```cpp block, which the first test case checks line by
// line (the README adds only its `#include <mpe/mpe.hpp>` line, which is this file's).
// The second runs it on a small random batch and checks what it claims: the forward equals
// a plain FP32 embedding bag over the table's weights (bit for bit: the numerics contract),
// the statistics count every lookup, and save()/load() give back the same table.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mpe/mpe.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/embedding_bag.hpp"

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  REQUIRE_MESSAGE(f.good(), "cannot read " << p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The README's first ```cpp block without its #include line and the blank line after it.
std::vector<std::string> readme_example() {
  const auto lines = lines_of(read(std::filesystem::path(MPE_SOURCE_DIR) / "README.md"));
  std::vector<std::string> block;
  bool in = false;
  for (const auto& l : lines) {
    if (!in && l == "```cpp") {
      in = true;
    } else if (in && l == "```") {
      break;
    } else if (in) {
      block.push_back(l);
    }
  }
  REQUIRE(block.size() > 2);
  CHECK(block[0] == "#include <mpe/mpe.hpp>");
  CHECK(block[1].empty());
  return {block.begin() + 2, block.end()};
}

// This file's lines strictly between the example-begin and example-end markers, with the
// function body's indentation (2 spaces) removed.
std::vector<std::string> marked_example() {
  const auto lines =
      lines_of(read(std::filesystem::path(MPE_SOURCE_DIR) / "tests/embedding/test_readme_example.cpp"));
  std::vector<std::string> block;
  bool in = false;
  // The markers spelt in two pieces, so that these lines are not markers themselves.
  const std::string begin = std::string("// example-") + "begin readme";
  const std::string end = std::string("// example-") + "end readme";
  for (const auto& l : lines) {
    if (l.find(begin) != std::string::npos) {
      in = true;
    } else if (l.find(end) != std::string::npos) {
      break;
    } else if (in) {
      block.push_back(l.size() >= 2 && l.compare(0, 2, "  ") == 0 ? l.substr(2) : l);
    }
  }
  return block;
}

}  // namespace

TEST_CASE("the README's example is this test's code") {
  const auto readme = readme_example();
  const auto here = marked_example();
  REQUIRE(!here.empty());
  CHECK(readme.size() == here.size());
  for (std::size_t i = 0; i < readme.size() && i < here.size(); ++i) {
    INFO("README example line " << i + 3 << " vs tests/embedding/test_readme_example.cpp");
    CHECK(readme[i] == here[i]);
  }
}

TEST_CASE("the README's example runs and does what it says") {
  const auto dir = std::filesystem::temp_directory_path() / ("mpe_readme_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);  // the example saves "table.mpe" in the working directory

  // What the example's comments say the caller has: B bags per table, CSR indices/offsets,
  // per-sample weights, and a test batch.
  const std::vector<std::int64_t> table_rows = {1'000'000, 50'000, 3'000};
  std::mt19937_64 rng(7);
  const std::int64_t B = 64;
  const ref::Batch train = ref::random_batch(rng, table_rows, B, 6, /*weighted=*/true);
  const ref::Batch test = ref::random_batch(rng, table_rows, B, 6, /*weighted=*/false);
  const std::vector<std::int64_t>& indices = train.indices;
  const std::vector<std::int64_t>& offsets = train.offsets;
  const std::vector<float>& per_sample_weights = train.weights;
  const std::vector<std::int64_t>& test_indices = test.indices;
  const std::vector<std::int64_t>& test_offsets = test.offsets;
  std::vector<float> test_output(static_cast<std::size_t>(B * 3 * 64));

  // clang-format off
  // example-begin readme
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {1'000'000, 50'000, 3'000};  // T = 3 tables, trained in one call
  cfg.dim = 64;                                  // D
  cfg.cache_rows = 52'650;                       // FP32 cache: 5 % of the rows (0 = none)
  cfg.seed = 1;                                  // stochastic-rounding stream
  mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<32>, mpe::StochasticRounding> emb(cfg);
  emb.init_uniform(-0.01f, 0.01f);               // or emb.set_weights(rows_fp32, first_row)

  // CSR input of B bags per table, table-major: bag j = t*B + b holds
  // indices[offsets[j] .. offsets[j+1]), row ids local to table t. indices (n) and offsets
  // (T*B + 1) are int64, per_sample_weights (n) float; host memory with the default HostBackend.
  std::vector<float> output(B * 3 * 64), grad_output(B * 3 * 64);  // (B, T*D)

  emb.prefetch(indices, offsets);                     // optional: populate the cache early
  emb.forward(indices, offsets, output);              // mpe::Pooling::Sum by default
  emb.forward(indices, offsets, output, mpe::Pooling::Sum, per_sample_weights);  // (n) floats
  emb.backward(grad_output, mpe::RowwiseAdagrad{0.05f});   // or mpe::Sgd{lr}; for the last forward
  emb.forward_inference(test_indices, test_offsets, test_output);  // const: for evaluation

  std::vector<float> rows(10 * 64);
  emb.get_weights(rows, /*first_row=*/0);             // (rows, D) FP32, read through the cache
  mpe::CacheStats s = emb.stats();                    // hits, misses, evictions, write-backs, bytes moved
  mpe::MemoryFootprint m = emb.memory();              // bytes: store, cache, optimizer, metadata, workspace
  emb.flush();                                        // write dirty cache rows back to the store
  emb.save("table.mpe");                              // exact state, atomic (emb.state(): part by part)
  emb.load("table.mpe");                              // verifies everything before replacing anything
  // example-end readme
  // clang-format on

  // The whole table through the reference: the FP32 bag over get_weights' rows gives the
  // example's test output bit for bit (grad_output was zero, so the backward moved nothing
  // and the inference saw the same weights as now).
  ref::EmbeddingBag bag(table_rows, 64);
  emb.get_weights(bag.weights(), 0);
  CHECK(ref::same_bits(bag.forward(test, mpe::Pooling::Sum), test_output));
  CHECK(ref::same_bits(bag.forward(train, mpe::Pooling::Sum), output));
  // rows = the first 10 rows of the table.
  CHECK(ref::same_bits(std::vector<float>(bag.weights().begin(), bag.weights().begin() + 10 * 64), rows));
  // Statistics: each populate counts every index once, and every unique row is a hit or a
  // miss; the store holds 1,053,000 rows of D + 8 = 72 bytes (a multiple of the alignment).
  CHECK(s.lookups > 0);
  CHECK(s.lookups % indices.size() == 0);
  CHECK(s.hits + s.misses == s.unique_rows);
  CHECK(m.store_bytes == std::size_t{1'053'000} * 72);
  // load() gave back the saved table: a fresh object loading the file holds the same rows.
  mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<32>, mpe::StochasticRounding> again(cfg);
  again.load("table.mpe");
  std::vector<float> reloaded(bag.weights().size());
  again.get_weights(reloaded, 0);
  CHECK(ref::same_bits(reloaded, bag.weights()));

  std::filesystem::current_path(cwd);
  std::filesystem::remove_all(dir);
}
