// SPDX-License-Identifier: Apache-2.0
/// @file mpe/storage/all.hpp
/// @brief Every row format of the store, one header each: `Fp32`, `Fp16`, `Bf16`, `Int8Rowwise`,
/// `Int4Rowwise`, `Int2Rowwise`, `Fp8E4M3Rowwise`, `Fp8E5M2Rowwise`.
#pragma once

#include "mpe/storage/bf16.hpp"
#include "mpe/storage/fp16.hpp"
#include "mpe/storage/fp32.hpp"
#include "mpe/storage/fp8_rowwise.hpp"
#include "mpe/storage/int2_rowwise.hpp"
#include "mpe/storage/int4_rowwise.hpp"
#include "mpe/storage/int8_rowwise.hpp"
