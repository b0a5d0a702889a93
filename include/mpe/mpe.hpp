// SPDX-License-Identifier: Apache-2.0
/// @file mpe/mpe.hpp
/// @brief Everything of mpe's public contract v1 (host backend). Include
/// <mpe/mpe.cuh> as well, under nvcc, for CudaBackend.
#pragma once

#include "mpe/backend/host_backend.hpp"
#include "mpe/cache/all.hpp"
#include "mpe/cache/cache_ref.hpp"
#include "mpe/core/types.hpp"
#include "mpe/embedding/cached_embedding.hpp"
#include "mpe/embedding/mixed_dim_embedding.hpp"
#include "mpe/embedding/tiered_rows.hpp"
#include "mpe/io/checkpoint.hpp"
#include "mpe/numeric/half.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/numeric/rounding.hpp"
#include "mpe/optim/all.hpp"
#include "mpe/storage/all.hpp"
