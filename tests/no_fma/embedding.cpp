// SPDX-License-Identifier: Apache-2.0
// Two whole CachedEmbedding instantiations (every member: forward, backward, admission,
// checkpoints, the host SIMD paths they dispatch to), compiled by tests/no_fma/check.cmake with
// each compiler under -ffp-contract=fast: the library compiles with GCC and Clang, and the
// object holds no FMA instruction (the numerics contract).
#include <mpe/mpe.hpp>

template class mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<32>, mpe::StochasticRounding>;
template class mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::SecondTouchLru<32>, mpe::StochasticRounding>;
