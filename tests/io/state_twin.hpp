// SPDX-License-Identifier: Apache-2.0
// The state twin test (test_state_twin_*.cpp): a table trained k steps and a fresh table
// given its state through the state interface (CachedEmbedding::state() copied to host,
// restore_state(); no file) must then give the same bits as each other for 10 more steps:
// every forward() output, the weights, the statistics and the whole state. A member that
// changes forward() or backward() results and is left out of TableState makes the twins
// differ (the lead's rule for new members: docs/extending.md).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "io/checkpoint_common.hpp"
#include "io/state_image.hpp"
#include "reference/policy_lists.hpp"

namespace ckt {

/// The cache policies of mpe_test::Caches at positions i with i % Parts == Part (so the
/// policies split over several translation units, each of a modest compile time, and a new
/// policy in the list lands in one of them).
template <class Tuple, std::size_t Part, std::size_t Parts,
          class Seq = std::make_index_sequence<std::tuple_size_v<Tuple>>>
struct EveryNth;
template <class Tuple, std::size_t Part, std::size_t Parts, std::size_t... I>
struct EveryNth<Tuple, Part, Parts, std::index_sequence<I...>> {
  using type = decltype(std::tuple_cat(
      std::declval<std::conditional_t<I % Parts == Part, std::tuple<std::tuple_element_t<I, Tuple>>,
                                      std::tuple<>>>()...));
};

/// The twin's table: INT8 rows, cache policy C, stochastic rounding, BF16 optimizer state
/// (a compact precision: the cached rows' FP32 state is a part of the state too).
template <class C>
using TwinTable =
    mpe::CachedEmbedding<mpe::Int8Rowwise, C, mpe::StochasticRounding, mpe::HostBackend, mpe::StateBf16>;

/// Where the copy is taken.
enum class CopyAt {
  Pipelined,      ///< after backward(k) of the pipelined loop: the prefetch of batch k + 1 pending
  OwedAdmission,  ///< after forward(k) without a prefetch under defer_admission: its admission owed
};

inline mpe::EmbeddingConfig twin_config(bool defer, bool slot_index) {
  mpe::EmbeddingConfig c = small_config(7);
  c.defer_admission = defer;
  c.slot_index = slot_index;  // in the store rows: the state holds the rows without the entries
  return c;
}

/// Trains `a` k = 7 steps, copies its state into a fresh table built with another seed, then
/// runs 10 more steps on both: outputs, weights, stats and state equal bit for bit.
template <class E, class Opt>
void check_twin(const Opt& opt, bool defer, bool slot_index, CopyAt at) {
  CAPTURE(defer);
  CAPTURE(slot_index);
  CAPTURE(static_cast<int>(at));
  const mpe::EmbeddingConfig c = twin_config(defer, slot_index);
  constexpr std::uint64_t k = 7;
  E a(c);
  a.init_uniform(-0.5f, 0.5f);
  std::vector<float> out_a;
  if (at == CopyAt::Pipelined) {
    const Batch first = make_batch(c, 6, 0);
    a.prefetch(first.indices, first.offsets);
    for (std::uint64_t s = 0; s < k; ++s) pipelined_step(a, s, opt);
    REQUIRE_FALSE(a.state().pending_offsets.empty());  // the prefetch of batch k is part of the copy
  } else {
    for (std::uint64_t s = 0; s < k; ++s) {
      const Batch b = make_batch(c, 6, s);
      std::vector<float> out(b.grad.size());
      a.forward(b.indices, b.offsets, out);
      a.backward(b.grad, opt);
    }
    const Batch b = make_batch(c, 6, k);
    out_a.resize(b.grad.size());
    a.forward(b.indices, b.offsets, out_a);  // its admission is owed until backward(k)
  }
  const StateImage image = StateImage::of(a);
  mpe::EmbeddingConfig other = c;
  other.seed = 999;  // the state holds the seed
  E b(other);
  b.restore_state(image.view());
  CHECK(b.config().seed == c.seed);
  CHECK(StateImage::of(b).bytes() == image.bytes());
  bool outputs_equal = true;
  if (at == CopyAt::OwedAdmission) {
    // The copy is the state before forward(k): b repeats it, then both step.
    const Batch bk = make_batch(c, 6, k);
    std::vector<float> out_b(bk.grad.size());
    b.forward(bk.indices, bk.offsets, out_b);
    outputs_equal = same_bits(out_a, out_b);
    a.backward(bk.grad, opt);
    b.backward(bk.grad, opt);
    for (std::uint64_t s = k + 1; s < k + 10; ++s) {
      const Batch bs = make_batch(c, 6, s);
      std::vector<float> oa(bs.grad.size()), ob(bs.grad.size());
      a.forward(bs.indices, bs.offsets, oa);
      b.forward(bs.indices, bs.offsets, ob);
      outputs_equal = same_bits(oa, ob) && outputs_equal;
      a.backward(bs.grad, opt);
      b.backward(bs.grad, opt);
    }
  } else {
    for (std::uint64_t s = k; s < k + 10; ++s) {
      outputs_equal = same_bits(pipelined_step(a, s, opt), pipelined_step(b, s, opt)) && outputs_equal;
    }
  }
  CHECK(outputs_equal);
  CHECK(b.step() == a.step());
  CHECK(same_bits(weights(a), weights(b)));
  CHECK(same_stats(a.stats(), b.stats()));
  CHECK(snapshot(a) == snapshot(b));
  // The 10 steps moved the state (else the comparison above proves little).
  CHECK_FALSE(StateImage::of(a).bytes() == image.bytes());
}

/// Every copy point, defer_admission on and off, with and without a slot index in the
/// store rows, for optimizer Opt.
template <class E, class Opt>
void check_twins(const Opt& opt) {
  for (const bool slot_index : {false, true}) {
    for (const bool defer : {false, true}) check_twin<E>(opt, defer, slot_index, CopyAt::Pipelined);
    check_twin<E>(opt, true, slot_index, CopyAt::OwedAdmission);
  }
}

/// The image read back from a table restored from it equals it, part by part, and every part
/// of it is non-trivial where the policy keeps it (so the round trip covers each).
template <class E>
void check_round_trip() {
  const mpe::EmbeddingConfig c = twin_config(false, true);
  E a(c);
  a.init_uniform(-0.5f, 0.5f);
  const Batch first = make_batch(c, 6, 0);
  a.prefetch(first.indices, first.offsets);
  for (std::uint64_t s = 0; s < 6; ++s) pipelined_step(a, s, mpe::Adam{0.01f});
  const StateImage m = StateImage::of(a);
  const auto nonzero = [](const auto& v) {
    for (const auto& x : v) {
      if (x != std::remove_cvref_t<decltype(x)>{}) return true;
    }
    return false;
  };
  CHECK(nonzero(m.store));
  CHECK(nonzero(m.cache_rows));
  CHECK(nonzero(m.tags));
  CHECK(nonzero(m.last_use));
  CHECK(nonzero(m.dirty));
  CHECK(m.policy_words.size() ==
        static_cast<std::size_t>(E::cache_policy::meta_words(static_cast<std::int64_t>(m.tags.size()))));
  CHECK(m.optimizer == "adam");
  CHECK(m.state_values_per_row == 2u * static_cast<std::uint32_t>(c.dim));
  CHECK(nonzero(m.optimizer_state));
  CHECK(nonzero(m.cached_optimizer_state));
  CHECK(m.stats.lookups > 0);
  CHECK(m.step == 6);
  CHECK(m.populate_counter > 0);
  CHECK(m.calls >= m.populate_counter + m.step);
  CHECK_FALSE(m.pending_offsets.empty());
  E b(twin_config(false, true));
  b.restore_state(m.view());
  const StateImage back = StateImage::of(b);
  CHECK(back.store == m.store);
  CHECK(back.cache_rows == m.cache_rows);
  CHECK(back.tags == m.tags);
  CHECK(back.last_use == m.last_use);
  CHECK(back.dirty == m.dirty);
  CHECK(back.policy_words == m.policy_words);
  CHECK(back.optimizer == m.optimizer);
  CHECK(back.state_values_per_row == m.state_values_per_row);
  CHECK(back.optimizer_state == m.optimizer_state);
  CHECK(back.cached_optimizer_state == m.cached_optimizer_state);
  CHECK(same_stats(back.stats, m.stats));
  CHECK(back.step == m.step);
  CHECK(back.decay_clock == m.decay_clock);
  CHECK(back.populate_counter == m.populate_counter);
  CHECK(back.calls == m.calls);
  CHECK(back.seed == m.seed);
  CHECK(back.pending_indices == m.pending_indices);
  CHECK(back.pending_offsets == m.pending_offsets);
  CHECK(back.bytes() == m.bytes());
}

}  // namespace ckt
