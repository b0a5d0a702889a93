// SPDX-License-Identifier: Apache-2.0
/// @file formats.hpp
/// @brief All row formats of the store.
#pragma once

#include "mpe/storage/fp16.hpp"
#include "mpe/storage/fp32.hpp"
#include "mpe/storage/fp8_rowwise.hpp"
#include "mpe/storage/int4_rowwise.hpp"
#include "mpe/storage/int8_rowwise.hpp"
