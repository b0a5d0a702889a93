// SPDX-License-Identifier: Apache-2.0
/// @file mpe/mpe.cuh
/// @brief Convenience include: mpe's public contract plus `mpe::CudaBackend` (needs nvcc).
#pragma once

#include "mpe/backend/cuda_backend.cuh"
#include "mpe/mpe.hpp"
