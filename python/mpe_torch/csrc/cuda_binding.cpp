// SPDX-License-Identifier: Apache-2.0
// mpe_torch._C_cuda's binding: binding.cpp compiled with MPE_TORCH_CUDA (g++, torch's CUDA
// headers), so the CPU and the CUDA module share one source (tensor checks, autograd
// bookkeeping, messages).
#define MPE_TORCH_CUDA 1
#include "binding.cpp"  // NOLINT(bugprone-suspicious-include)
