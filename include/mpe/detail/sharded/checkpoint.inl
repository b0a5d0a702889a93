// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/sharded/checkpoint.inl
/// @brief ShardedEmbedding: save / load of a checkpoint across the ranks (each rank's shard files,
/// rank 0's manifest `plan.txt` as the commit point), the next unused shard name and the
/// manifest's text (included by mpe/sharded/sharded_embedding.hpp; the manifest's parser,
/// parse_manifest, is defined in the class).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "mpe/core/types.hpp"

namespace mpe::sharded {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::save(
    const std::filesystem::path& dir) const {
  auto* self = const_cast<ShardedEmbedding*>(this);
  std::string err;
  std::vector<std::int64_t> attempt{1};
  try {
    std::filesystem::create_directories(dir);
    attempt[0] = next_save_number(dir, steps_);
  } catch (const std::exception& e) {
    err = "save: rank " + rank_str() + ": " + e.what();
  }
  self->agree(kSave, err, {}, /*runtime=*/true);
  comm_->allreduce_max(std::span<std::int64_t>(attempt));  // every rank's view of dir
  const std::string prefix = "step" + std::to_string(steps_) + ".save" + std::to_string(attempt[0]);
  try {
    for (std::size_t gi = 0; gi < locals_.size(); ++gi)
      locals_[gi]->save(dir / shard_file(prefix, rank(), gi));
  } catch (const std::exception& e) {
    err = "save: rank " + rank_str() + ": " + e.what();
  }
  self->agree(kSave, err, {}, /*runtime=*/true);
  err.clear();
  if (rank() == 0) {
    try {
      const std::filesystem::path tmp = dir / "plan.txt.tmp";
      {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        f << manifest_text(prefix);
        f.flush();
        if (!f) throw std::system_error(errno, std::generic_category(), "writing " + tmp.string());
      }
      std::filesystem::rename(tmp, dir / "plan.txt");
    } catch (const std::exception& e) {
      err = "save: rank 0: manifest: " + std::string(e.what());
    }
  }
  self->agree(kSave, err, {}, /*runtime=*/true);
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline void ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::load(
    const std::filesystem::path& dir) {
  std::string err;
  std::vector<std::unique_ptr<local_type>> fresh;
  Manifest m;
  try {
    std::ifstream f(dir / "plan.txt", std::ios::binary);
    if (!f) throw checkpoint_error("cannot read manifest " + (dir / "plan.txt").string());
    std::ostringstream s;
    s << f.rdbuf();
    m = parse_manifest(s.str());
    if (m.precision != sharded::to_string(options_.precision))
      throw checkpoint_error("manifest comm_precision " + m.precision + " differs from this object's " +
                             sharded::to_string(options_.precision) + " (ShardOptions::precision)");
    if (m.plan.world_size != plan_.world_size)
      throw checkpoint_error("checkpoint has " + std::to_string(m.plan.world_size) + " ranks, this run " +
                             std::to_string(plan_.world_size) + " (re-sharding is not supported)");
    if (!(m.plan == plan_)) throw checkpoint_error("checkpoint's sharding plan differs from this object's");
    for (std::size_t gi = 0; gi < locals_.size(); ++gi) {
      auto l = std::make_unique<local_type>(locals_[gi]->config());
      l->load(dir / shard_file(m.shards, rank(), gi));
      fresh.push_back(std::move(l));
    }
  } catch (const std::exception& e) {
    err = "Cload: rank " + rank_str() + ": " + e.what();
  }
  agree(kLoad, err);
  locals_ = std::move(fresh);
  steps_ = m.step;
  opt_name_ = m.optimizer;
  exchanges_ = m.exchanges;
  fwd_ = {};
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline std::int64_t ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::next_save_number(
    const std::filesystem::path& dir, std::uint64_t step) {
  const std::string head = "step" + std::to_string(step) + ".save";
  std::int64_t k = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind(head, 0) != 0) continue;
    std::int64_t v = 0;
    std::size_t i = head.size();
    for (; i < n.size() && n[i] >= '0' && n[i] <= '9' && v < (std::int64_t{1} << 58); ++i)
      v = 10 * v + (n[i] - '0');
    if (i > head.size()) k = std::max(k, v);
  }
  return k + 1;
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding, Communicator Comm, class Backend>
inline std::string ShardedEmbedding<Storage, Cache, Rounding, Comm, Backend>::manifest_text(
    const std::string& shards) const {
  return "mpe-sharded-checkpoint v2\nstep " + std::to_string(steps_) + "\nstorage " + Storage::name +
         "\ncache " + Cache::name + "\nrounding " + Rounding::name + "\ncomm_precision " +
         sharded::to_string(options_.precision) + "\noptimizer " + (opt_name_.empty() ? "none" : opt_name_) +
         "\nexchanges " + std::to_string(exchanges_) + "\nshards " + shards + "\n" + plan_.to_string();
}

}  // namespace mpe::sharded
