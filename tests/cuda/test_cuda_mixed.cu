// SPDX-License-Identifier: Apache-2.0
// MixedDimEmbedding on CudaBackend (indices, offsets, weights, output and gradient in
// device memory) against HostBackend, bit for bit: three D-groups, Sum / Mean / weighted,
// with and without prefetch, 5 row-wise Adagrad steps (and one group, D 8: the caller's
// spans passed through): every output, forward_inference,
// every table's weights, the checkpoint bytes, the counters and the step; and two
// refusals (an index outside its table, a NaN gradient) with HostBackend's message and
// nothing changed.
#include <doctest/doctest.h>

#include "compare.hpp"
#include "mixed_scenario.hpp"

namespace mpe_test {
extern template MixedResult run_mixed<mpe::HostBackend>(const mpe::HostBackend&, const MixedScenario&);
}  // namespace mpe_test

TEST_CASE("CUDA == host, bit for bit: MixedDimEmbedding, three D-groups and one") {
  using mpe_test::first_difference;
  for (const mpe_test::MixedScenario& sc : mpe_test::mixed_scenarios()) {
    INFO(sc.label());
    const mpe_test::MixedResult host = mpe_test::run_mixed(mpe::HostBackend{}, sc);
    const mpe_test::MixedResult dev = mpe_test::run_mixed(mpe::CudaBackend{}, sc);
    MPE_TEST_SAME_BITS(outputs);
    MPE_TEST_SAME_BITS(inference);
    MPE_TEST_SAME_BITS(weights);
    MPE_TEST_SAME_BITS(checkpoint);
    ref::check_stats_equal(host.stats, dev.stats);
    CHECK(host.step == dev.step);
    CHECK(host.stats.hits > 0);
    CHECK(host.stats.evictions > 0);
    REQUIRE(host.refusals.size() == 2);
    const std::string bad = "is outside table " + std::to_string(host.bad_table);
    CHECK(host.refusals[0].find(bad) != std::string::npos);
    CHECK(host.refusals[1].find(sc.one_group ? "grad_output[" : "grad_output[3, ") != std::string::npos);
    CHECK(dev.refusals == host.refusals);
    // Several groups: checked before any group runs, the bytes stay the same. One group:
    // its own checks (its checkpoint also counts the refused call), as on the host.
    if (!sc.one_group) CHECK(host.unchanged == std::vector<bool>{true, true});
    CHECK(dev.unchanged == host.unchanged);
  }
}
