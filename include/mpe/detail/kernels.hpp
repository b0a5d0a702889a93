// SPDX-License-Identifier: Apache-2.0
/// @file kernels.hpp
/// @brief Every per-item functor of CachedEmbedding (not public), one file per concern:
/// batch.hpp (expansion, validation, unique rows), pooling.hpp (forward), update.hpp
/// (backward), row_io.hpp (whole-row reads and writes, flush), statistics.hpp (counters);
/// cache admission is in mpe/cache/detail/admission.hpp.
#pragma once

#include "mpe/detail/batch.hpp"
#include "mpe/detail/pooling.hpp"
#include "mpe/detail/row_io.hpp"
#include "mpe/detail/statistics.hpp"
#include "mpe/detail/update.hpp"
