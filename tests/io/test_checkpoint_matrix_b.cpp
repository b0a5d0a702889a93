// SPDX-License-Identifier: Apache-2.0
// Checkpoint round trip and exact resume (between steps, and with a prefetch pending) for Int8Rowwise and
// Int4Rowwise stores, every cache policy of tests/reference/policy_lists.hpp and both rounding policies
// (split across two files to keep each compile short).
#include <typeinfo>

#include "io/checkpoint_common.hpp"

TEST_CASE_TEMPLATE_DEFINE("checkpoint: 20 steps after save/load equal 20 uninterrupted steps", T, resume_b) {
  ckt::check_resume<typename T::Embedding>(ckt::temp_dir(std::string("matrix_") + typeid(T).name()));
}
TEST_CASE_TEMPLATE_DEFINE(
    "checkpoint with a prefetch pending: 20 pipelined steps after save/load equal 20 "
    "uninterrupted ones",
    T, pipelined_b) {
  ckt::check_resume_pipelined<typename T::Embedding>(
      ckt::temp_dir(std::string("pipelined_") + typeid(T).name()));
}
TEST_CASE_TEMPLATE_APPLY(resume_b, ckt::combos_t<mpe::Int8Rowwise, mpe::Int4Rowwise>);
TEST_CASE_TEMPLATE_APPLY(pipelined_b, ckt::combos_t<mpe::Int8Rowwise, mpe::Int4Rowwise>);
