// SPDX-License-Identifier: Apache-2.0
// mpe_torch: which instantiations exist, and the optimizer hyperparameter checks.
#include <mpe/optim/all.hpp>
#include <stdexcept>

#include "group.hpp"

namespace mpe_torch {

namespace {
const char* const kStorages[] = {"fp32", "fp16", "int8", "int4"};
const char* const kCaches[] = {"none", "lru"};
const char* const kRoundings[] = {"stochastic", "nearest"};
}  // namespace

std::vector<std::string> built_combinations() {
  std::vector<std::string> out;
  for (const char* s : kStorages)
    for (const char* c : kCaches)
      for (const char* r : kRoundings) out.push_back(std::string(s) + "/" + c + "/" + r);
  return out;
}

std::unique_ptr<Group> make_group(const PolicyNames& n, const mpe::MixedDimConfig& cfg) {
  std::unique_ptr<Group> g;
  if (n.storage == "fp32")
    g = make_group_fp32(n, cfg);
  else if (n.storage == "fp16")
    g = make_group_fp16(n, cfg);
  else if (n.storage == "int8")
    g = make_group_int8(n, cfg);
  else if (n.storage == "int4")
    g = make_group_int4(n, cfg);
  if (!g) {
    std::string list;
    for (const auto& c : built_combinations()) list += (list.empty() ? "" : ", ") + c;
    throw std::invalid_argument("mpe_torch: storage/cache/rounding = " + n.storage + "/" + n.cache + "/" +
                                n.rounding + " is not built; built: " + list);
  }
  return g;
}

std::string check_optimizer(const OptSpec& o) {
  switch (o.kind) {
    case OptKind::Sgd:
      return mpe::OptimizerRule<mpe::Sgd>::check(mpe::Sgd{o.learning_rate});
    case OptKind::RowwiseAdagrad:
      return mpe::OptimizerRule<mpe::RowwiseAdagrad>::check(mpe::RowwiseAdagrad{o.learning_rate, o.eps});
    case OptKind::Adagrad:
      return mpe::OptimizerRule<mpe::Adagrad>::check(mpe::Adagrad{o.learning_rate, o.eps});
    case OptKind::Adam:
      return mpe::OptimizerRule<mpe::Adam>::check(mpe::Adam{o.learning_rate, o.beta1, o.beta2, o.eps});
  }
  return "unknown optimizer kind";
}

}  // namespace mpe_torch
