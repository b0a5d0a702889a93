// SPDX-License-Identifier: Apache-2.0
/// @file mpe.hpp
/// @brief Everything of mpe's public contract v1 (host backend). Include
/// <mpe/cuda_backend.cuh> as well, under nvcc, for CudaBackend.
#pragma once

#include "mpe/backend/host_backend.hpp"
#include "mpe/cache/cache_ref.hpp"
#include "mpe/cache/policies.hpp"
#include "mpe/cached_embedding.hpp"
#include "mpe/io/checkpoint.hpp"
#include "mpe/mixed_dim_embedding.hpp"
#include "mpe/numeric/half.hpp"
#include "mpe/numeric/philox.hpp"
#include "mpe/numeric/rounding.hpp"
#include "mpe/optim/optimizers.hpp"
#include "mpe/storage/formats.hpp"
#include "mpe/types.hpp"
