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

namespace mpe {

/// A list of storage formats (a type list: see KnownStorages).
template <class... Formats>
struct StorageList {};

/// Every storage format of the library, for code that covers "every format" (the PyTorch
/// binding's choices are this list). A new format adds one entry here.
using KnownStorages =
    StorageList<Fp32, Fp16, Bf16, Int8Rowwise, Int4Rowwise, Int2Rowwise, Fp8E4M3Rowwise, Fp8E5M2Rowwise>;

}  // namespace mpe
