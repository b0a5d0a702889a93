// SPDX-License-Identifier: Apache-2.0
// mpe_torch._C.TieredRows (tiered_binding.cpp): registered by the CPU module's binding.cpp.
#pragma once

#include <torch/extension.h>

namespace mpe_torch {
void bind_tiered_rows(pybind11::module_& m);
}  // namespace mpe_torch
