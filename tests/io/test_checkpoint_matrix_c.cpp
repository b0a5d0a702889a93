// SPDX-License-Identifier: Apache-2.0
// Checkpoint round trip and exact resume (between steps, and with a prefetch pending) for the FP8 row-wise
// stores (Fp8E4M3Rowwise, Fp8E5M2Rowwise), every cache policy of tests/reference/policy_lists.hpp and both
// rounding policies (the other stores are in matrix_a / matrix_b).
#include <typeinfo>

#include "io/checkpoint_common.hpp"

TEST_CASE_TEMPLATE_DEFINE("checkpoint: 20 steps after save/load equal 20 uninterrupted steps", T, resume_c) {
  ckt::check_resume<typename T::Embedding>(ckt::temp_dir(std::string("matrix_") + typeid(T).name()));
}
TEST_CASE_TEMPLATE_DEFINE(
    "checkpoint with a prefetch pending: 20 pipelined steps after save/load equal 20 "
    "uninterrupted ones",
    T, pipelined_c) {
  ckt::check_resume_pipelined<typename T::Embedding>(
      ckt::temp_dir(std::string("pipelined_") + typeid(T).name()));
}
TEST_CASE_TEMPLATE_APPLY(resume_c, ckt::combos_t<mpe::Fp8E4M3Rowwise, mpe::Fp8E5M2Rowwise>);
TEST_CASE_TEMPLATE_APPLY(pipelined_c, ckt::combos_t<mpe::Fp8E4M3Rowwise, mpe::Fp8E5M2Rowwise>);
