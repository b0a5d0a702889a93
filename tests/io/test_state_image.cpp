// SPDX-License-Identifier: Apache-2.0
// CachedEmbedding's state interface refusing bad input: restore_state() with a part of the
// wrong size names the part and both sizes and changes nothing; import_store_rows() and
// read_store_rows() name their argument; the phased backward refuses an apply without a
// prepared step.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/state_twin.hpp"

namespace {

using E = ckt::TwinTable<mpe::Lfu<4>>;  // a policy with metadata words

/// A trained table with a prefetch pending, and its image.
struct Trained {
  E e{ckt::twin_config(false, true)};
  ckt::StateImage image;
  Trained() {
    e.init_uniform(-0.5f, 0.5f);
    const ckt::Batch first = ckt::make_batch(e.config(), 6, 0);
    e.prefetch(first.indices, first.offsets);
    for (std::uint64_t s = 0; s < 4; ++s) ckt::pipelined_step(e, s, mpe::Adam{0.01f});
    image = ckt::StateImage::of(e);
  }
};

}  // namespace

TEST_CASE("state interface: restore_state refuses a part of the wrong size, naming it, and changes nothing") {
  Trained t;
  const std::vector<std::uint8_t> before = ckt::snapshot(t.e);
  struct Bad {
    const char* expect;  // in the message
    std::function<void(ckt::StateImage&)> spoil;
  };
  const std::vector<Bad> bad = {
      // What the bytes mean, before any size (an image of other policies may have equal sizes).
      {"image.storage = 'fp16' but this table's Storage is '",
       [](ckt::StateImage& m) { m.storage = "fp16"; }},
      {"image.cache_policy = 'lru' but this table's Cache is 'lfu'",
       [](ckt::StateImage& m) { m.cache_policy = "lru"; }},
      {"image.rounding = 'nearest' but this table's Rounding is 'stochastic'",
       [](ckt::StateImage& m) { m.rounding = "nearest"; }},
      {"image.state_precision = 'fp16' but this table's StatePrecision is 'bf16'",
       [](ckt::StateImage& m) { m.state_precision = "fp16"; }},
      {"image.ways = 8", [](ckt::StateImage& m) { m.ways = 8; }},
      {"image.dim = ", [](ckt::StateImage& m) { m.dim += 1; }},
      {"image.table_rows = [", [](ckt::StateImage& m) { m.table_rows.back() += 1; }},
      // The pending prefetch: a valid CSR batch of this table's rows.
      {"image.pending_indices[0] = 1000000 is outside table 0",
       [](ckt::StateImage& m) { m.pending_indices.at(0) = 1000000; }},
      {"image.pending_offsets[0] = 1; must be 0", [](ckt::StateImage& m) { m.pending_offsets.at(0) = 1; }},
      {"image.store.size() = ", [](ckt::StateImage& m) { m.store.pop_back(); }},
      {"image.store_stride = ", [](ckt::StateImage& m) { m.row_bytes += 4; }},
      {"image.cache_rows.size() = ", [](ckt::StateImage& m) { m.cache_rows.push_back(0.0f); }},
      {"image.tags.size() = ", [](ckt::StateImage& m) { m.tags.pop_back(); }},
      {"image.last_use.size() = ", [](ckt::StateImage& m) { m.last_use.pop_back(); }},
      {"image.dirty.size() = ", [](ckt::StateImage& m) { m.dirty.push_back(0); }},
      {"image.policy_words.size() = ", [](ckt::StateImage& m) { m.policy_words.pop_back(); }},
      {"image.optimizer = 'lion' is not one of KnownOptimizers",
       [](ckt::StateImage& m) { m.optimizer = "lion"; }},
      {"image.state_values_per_row = 9; expected 10", [](ckt::StateImage& m) { m.state_values_per_row = 9; }},
      {"image.optimizer_state.size() = ", [](ckt::StateImage& m) { m.optimizer_state.resize(3); }},
      {"image.cached_optimizer_state.size() = ",
       [](ckt::StateImage& m) { m.cached_optimizer_state.clear(); }},
      {"image.pending_offsets.size() = ", [](ckt::StateImage& m) { m.pending_offsets.push_back(0); }},
      {"image.pending_indices.size() = ",
       [](ckt::StateImage& m) {
         m.pending_offsets.clear();  // no pending batch, but indices
       }},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.expect);
    ckt::StateImage m = t.image;
    b.spoil(m);
    CHECK_THROWS_WITH_AS(t.e.restore_state(m.view()), doctest::Contains(b.expect), std::invalid_argument);
    CHECK(ckt::snapshot(t.e) == before);
  }
  // The message gives the expected size too.
  ckt::StateImage m = t.image;
  m.tags.pop_back();
  const std::string message =
      "mpe::CachedEmbedding::restore_state: image.tags.size() = " + std::to_string(t.image.tags.size() - 1) +
      "; expected " + std::to_string(t.image.tags.size()) + " (slots)";
  CHECK_THROWS_WITH_AS(t.e.restore_state(m.view()), message.c_str(), std::invalid_argument);
  // The state of a table (store rows with slot-index entries) is not an image until copied.
  CHECK_THROWS_WITH_AS(t.e.restore_state(t.e.state()),
                       doctest::Contains("image.store_holds_slot_index = true"), std::invalid_argument);
  CHECK(ckt::snapshot(t.e) == before);
  // The unchanged image restores (the checks above refused nothing valid).
  t.e.restore_state(t.image.view());
  CHECK(ckt::snapshot(t.e) == before);
}

TEST_CASE("state interface: import_store_rows and read_store_rows name bad arguments and change nothing") {
  Trained t;
  const std::vector<std::uint8_t> before = ckt::snapshot(t.e);
  const std::size_t fs = t.e.state_row_bytes();
  std::vector<std::uint8_t> rows;
  t.e.read_store_rows(3, 2, rows);
  REQUIRE(rows.size() == 2 * fs);
  CHECK(std::vector<std::uint8_t>(t.image.store.begin() + 3 * static_cast<std::ptrdiff_t>(fs),
                                  t.image.store.begin() + 5 * static_cast<std::ptrdiff_t>(fs)) == rows);
  CHECK_THROWS_WITH_AS(t.e.read_store_rows(t.e.total_rows() - 1, 2, rows),
                       doctest::Contains("first_row = 71 with count = 2 leaves the table of 72 rows"),
                       std::invalid_argument);
  std::vector<std::uint8_t> short_rows(fs + 1);
  const std::string not_multiple = "rows.size() = " + std::to_string(fs + 1) + " is not a multiple";
  CHECK_THROWS_WITH_AS(t.e.import_store_rows(0, short_rows), doctest::Contains(not_multiple.c_str()),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(t.e.import_store_rows(71, rows), doctest::Contains("first_row = 71 with 2 rows"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(t.e.import_store_rows(0, rows, -1), doctest::Contains("saturated_rows = -1"),
                       std::invalid_argument);
  std::vector<std::uint8_t> padded = rows;
  padded[fs - 1] = 7;  // INT8 rows of D = 5 have padding bytes (data 13 bytes, row 16)
  REQUIRE(mpe::Int8Rowwise::data_bytes(5) < fs);
  const std::string padding = "rows: row 0 (global row 10) padding byte " + std::to_string(fs - 1) + " = 7";
  CHECK_THROWS_WITH_AS(t.e.import_store_rows(10, padded), doctest::Contains(padding.c_str()),
                       std::invalid_argument);
  CHECK(ckt::snapshot(t.e) == before);
}

TEST_CASE("state interface: apply_prepared_backward without a prepared step is refused") {
  Trained t;
  CHECK_THROWS_AS(t.e.apply_prepared_backward(mpe::Adam{0.01f}), std::logic_error);
  const ckt::Batch b = ckt::make_batch(t.e.config(), 6, 4);
  std::vector<float> out(b.grad.size());
  t.e.forward(b.indices, b.offsets, out);
  CHECK_THROWS_AS(t.e.apply_prepared_backward(mpe::Adam{0.01f}), std::logic_error);  // not prepared
  REQUIRE(t.e.prepare_backward(b.grad, mpe::Adam{0.01f}));
  CHECK_THROWS_WITH_AS(t.e.apply_prepared_backward(mpe::RowwiseAdagrad{0.01f}),
                       doctest::Contains("the step was prepared for adam, not rowwise_adagrad"),
                       std::logic_error);
  // The phases give backward()'s bits.
  Trained twin;
  std::vector<float> out2(b.grad.size());
  twin.e.forward(b.indices, b.offsets, out2);
  twin.e.backward(b.grad, mpe::Adam{0.01f});
  t.e.apply_prepared_backward(mpe::Adam{0.01f});
  t.e.finish_backward();
  CHECK(ckt::snapshot(t.e) == ckt::snapshot(twin.e));
  CHECK_THROWS_AS(t.e.apply_prepared_backward(mpe::Adam{0.01f}), std::logic_error);  // applied once
}
