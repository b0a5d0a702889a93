// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/all.hpp
/// @brief Every per-item functor of CachedEmbedding (not public), one file per concern:
/// batch.hpp (expansion, validation, unique rows), pooling.hpp (forward), update.hpp
/// (backward), row_io.hpp (whole-row reads and writes, flush), statistics.hpp (counters);
/// cache admission is in mpe/detail/kernels/admission.hpp.
#pragma once

#include "mpe/detail/kernels/batch.hpp"
#include "mpe/detail/kernels/pooling.hpp"
#include "mpe/detail/kernels/row_io.hpp"
#include "mpe/detail/kernels/statistics.hpp"
#include "mpe/detail/kernels/update.hpp"
