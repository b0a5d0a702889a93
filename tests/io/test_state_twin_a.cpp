// SPDX-License-Identifier: Apache-2.0
// The state twin test (tests/io/state_twin.hpp) for the cache policies at positions
// i % 2 == 0 of mpe_test::Caches (test_state_twin_b.cpp has the others).
#include <doctest/doctest.h>

#include "io/state_twin.hpp"

namespace {
template <class C>
struct Policy {
  using type = C;
};
using Policies = mpe_test::product_t<Policy, ckt::EveryNth<mpe_test::Caches, 0, 2>::type>;
}  // namespace

TEST_CASE_TEMPLATE_DEFINE(
    "state interface: a table given another's state trains the same bits (Adam, BF16 state)", T,
    twin_adam_a) {
  ckt::check_twins<ckt::TwinTable<typename T::type>>(mpe::Adam{0.01f});
}
TEST_CASE_TEMPLATE_DEFINE(
    "state interface: a table given another's state trains the same bits (RowwiseAdagrad, BF16 state)", T,
    twin_adagrad_a) {
  ckt::check_twins<ckt::TwinTable<typename T::type>>(mpe::RowwiseAdagrad{0.05f});
}
TEST_CASE_TEMPLATE_DEFINE("state interface: every part of the state image reads back as written", T,
                          round_trip_a) {
  ckt::check_round_trip<ckt::TwinTable<typename T::type>>();
}
TEST_CASE_TEMPLATE_APPLY(twin_adam_a, Policies);
TEST_CASE_TEMPLATE_APPLY(twin_adagrad_a, Policies);
TEST_CASE_TEMPLATE_APPLY(round_trip_a, Policies);
