// SPDX-License-Identifier: Apache-2.0
/// @file mpe/optim/all.hpp
/// @brief Every optimizer of mpe, and `KnownOptimizers`: the ones a checkpoint can name.
///
/// | optimizer | update (g = the row's gradient summed over the batch) | state per row |
/// |---|---|---|
/// | `Sgd{lr}` | w -= lr * g | none |
/// | `RowwiseAdagrad{lr, eps}` | G += mean_d(g_d^2); w -= lr / (sqrt(G) + eps) * g (FBGEMM
/// EXACT_ROWWISE_ADAGRAD) | 1 float | | `Adagrad{lr, eps}` | G_d += g_d^2; w_d -= lr * g_d / (sqrt(G_d) +
/// eps) (torch.optim.Adagrad) | D floats | | `Adam{lr, beta1, beta2, eps}` | bias-corrected Adam
/// (torch.optim.Adam, FBGEMM ADAM) | 2D floats |
#pragma once

#include "mpe/optim/adagrad.hpp"
#include "mpe/optim/adam.hpp"
#include "mpe/optim/optimizer.hpp"
#include "mpe/optim/rowwise_adagrad.hpp"
#include "mpe/optim/sgd.hpp"

namespace mpe {

/// The optimizers a checkpoint can name: add a new optimizer here (one entry).
using KnownOptimizers = OptimizerList<Sgd, RowwiseAdagrad, Adagrad, Adam>;

}  // namespace mpe
