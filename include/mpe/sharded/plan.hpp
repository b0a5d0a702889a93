// SPDX-License-Identifier: Apache-2.0
/// @file mpe/sharded/plan.hpp
/// @brief Sharding plans as plain values: which rank holds which rows and columns of
/// each table (table-wise, row-wise, column-wise, mixed per table), the planners that
/// make them, and their text form (printed, saved with checkpoints, parsed back).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mpe::sharded {

/// How one table is split over the ranks.
enum class ShardKind {
  Table,   ///< the whole table on `owner`
  Row,     ///< rank r holds rows [bounds[r], bounds[r+1]) with all D columns
  Column,  ///< rank r holds columns [bounds[r], bounds[r+1]) of every row
};

/// The kind's name in the plan's text form: "table", "row" or "column".
inline const char* to_string(ShardKind k) {
  return k == ShardKind::Table ? "table" : k == ShardKind::Row ? "row" : "column";
}

/// One table's sharding. `bounds` has world_size + 1 non-decreasing entries for Row
/// (0 .. rows) and Column (0 .. D), and is empty for Table.
struct TableSharding {
  ShardKind kind = ShardKind::Table;  ///< how the table is split
  /// The rank holding the whole table (Table only; keep 0 otherwise: == compares it and
  /// to_string() drops it).
  int owner = 0;
  /// Row bounds (Row: 0 .. rows) or column bounds (Column: 0 .. D), world_size + 1
  /// non-decreasing entries; rank r holds [bounds[r], bounds[r+1]). Empty for Table.
  std::vector<std::int64_t> bounds;
  /// Field-by-field equality (kind, owner, bounds).
  friend bool operator==(const TableSharding&, const TableSharding&) = default;
};

/// What one rank holds of one table: rows [row_begin, row_end), columns [col_begin,
/// col_end). Never empty.
struct Piece {
  int table = 0;                      ///< global table id, in [0, T)
  int rank = 0;                       ///< the rank holding the piece
  ShardKind kind = ShardKind::Table;  ///< the table's sharding kind
  /// First row held, local to the table (0 unless Row).
  std::int64_t row_begin = 0, row_end = 0;  ///< one past the last row held (the table's rows unless Row)
  /// First column held (0 unless Column).
  std::int32_t col_begin = 0, col_end = 0;  ///< one past the last column held (D unless Column)
  /// Rows held: row_end - row_begin (>= 1 in pieces_of()'s pieces).
  std::int64_t rows() const { return row_end - row_begin; }
  /// Columns held, the piece's dim: col_end - col_begin (>= 1 in pieces_of()'s pieces).
  std::int32_t cols() const { return col_end - col_begin; }
};

/// A plan for T tables of dim D over world_size ranks. A plain value: compare with ==,
/// print with to_string(), save()/load() as text.
struct ShardingPlan {
  int world_size = 1;    ///< number of ranks (the communicator's size())
  std::int32_t dim = 0;  ///< D, the same for every table
  /// Rows of each table, T entries (as EmbeddingConfig::table_rows).
  std::vector<std::int64_t> table_rows;
  std::vector<TableSharding> tables;  ///< one per table
  /// Field-by-field equality (world_size, dim, table_rows, tables): same plan.
  friend bool operator==(const ShardingPlan&, const ShardingPlan&) = default;

  /// Throws std::invalid_argument naming the table and field unless: world_size >= 1,
  /// dim >= 1, one sharding per table, every table >= 1 rows, owners in range, bounds of
  /// world_size + 1 entries from 0 to rows (Row) or D (Column), non-decreasing.
  void validate() const {
    auto bad = [](const std::string& m) { throw std::invalid_argument("ShardingPlan: " + m); };
    if (world_size < 1) bad("world_size = " + std::to_string(world_size) + " must be >= 1");
    if (dim < 1) bad("dim = " + std::to_string(dim) + " must be >= 1");
    if (table_rows.empty()) bad("no tables");
    if (tables.size() != table_rows.size())
      bad(std::to_string(tables.size()) + " shardings for " + std::to_string(table_rows.size()) + " tables");
    for (std::size_t t = 0; t < tables.size(); ++t) {
      const auto& s = tables[t];
      const std::string tn = "table " + std::to_string(t);
      if (table_rows[t] < 1) bad(tn + " has " + std::to_string(table_rows[t]) + " rows");
      if (s.kind == ShardKind::Table) {
        if (s.owner < 0 || s.owner >= world_size)
          bad(tn + ": owner " + std::to_string(s.owner) + " outside [0, " + std::to_string(world_size) + ")");
        continue;
      }
      const std::int64_t end = s.kind == ShardKind::Row ? table_rows[t] : dim;
      if (s.bounds.size() != static_cast<std::size_t>(world_size) + 1 || s.bounds.front() != 0 ||
          s.bounds.back() != end || !std::is_sorted(s.bounds.begin(), s.bounds.end()))
        bad(tn + ": " + mpe::sharded::to_string(s.kind) + " bounds must be " +
            std::to_string(world_size + 1) + " non-decreasing values from 0 to " + std::to_string(end));
    }
  }

  /// The non-empty pieces rank `r` holds, in table order.
  std::vector<Piece> pieces_of(int r) const {
    std::vector<Piece> out;
    for (std::size_t t = 0; t < tables.size(); ++t) {
      const auto& s = tables[t];
      Piece p{static_cast<int>(t), r, s.kind, 0, table_rows[t], 0, dim};
      if (s.kind == ShardKind::Table) {
        if (s.owner != r) continue;
      } else if (s.kind == ShardKind::Row) {
        p.row_begin = s.bounds[static_cast<std::size_t>(r)];
        p.row_end = s.bounds[static_cast<std::size_t>(r) + 1];
      } else {
        p.col_begin = static_cast<std::int32_t>(s.bounds[static_cast<std::size_t>(r)]);
        p.col_end = static_cast<std::int32_t>(s.bounds[static_cast<std::size_t>(r) + 1]);
      }
      if (p.rows() > 0 && p.cols() > 0) out.push_back(p);
    }
    return out;
  }

  /// Text form, one line per table, parsed back by parse():
  /// `mpe-sharding-plan v1` / `world_size N` / `dim D` / `tables T` /
  /// `table t rows R table OWNER` | `table t rows R row b0 .. bN` | `table t rows R column c0 .. cN`.
  std::string to_string() const {
    std::ostringstream o;
    o << "mpe-sharding-plan v1\nworld_size " << world_size << "\ndim " << dim << "\ntables " << tables.size()
      << "\n";
    for (std::size_t t = 0; t < tables.size(); ++t) {
      o << "table " << t << " rows " << table_rows[t] << ' ' << mpe::sharded::to_string(tables[t].kind);
      if (tables[t].kind == ShardKind::Table) o << ' ' << tables[t].owner;
      for (auto b : tables[t].bounds) o << ' ' << b;
      o << '\n';
    }
    return o.str();
  }

  /// Inverse of to_string(); throws std::invalid_argument for malformed text (and
  /// validates the result).
  static ShardingPlan parse(const std::string& text) {
    std::istringstream in(text);
    auto bad = [](const std::string& m) { throw std::invalid_argument("ShardingPlan::parse: " + m); };
    std::string w, v;
    ShardingPlan p;
    std::size_t T = 0;
    if (!(in >> w >> v) || w != "mpe-sharding-plan" || v != "v1")
      bad("missing header 'mpe-sharding-plan v1'");
    if (!(in >> w >> p.world_size) || w != "world_size") bad("missing world_size");
    if (!(in >> w >> p.dim) || w != "dim") bad("missing dim");
    if (!(in >> w >> T) || w != "tables" || T > (1u << 24)) bad("missing tables");
    p.table_rows.resize(T);
    p.tables.resize(T);
    for (std::size_t t = 0; t < T; ++t) {
      std::size_t idx = 0;
      std::string rows_kw, kind;
      if (!(in >> w >> idx >> rows_kw >> p.table_rows[t] >> kind) || w != "table" || idx != t ||
          rows_kw != "rows")
        bad("malformed line for table " + std::to_string(t));
      auto& s = p.tables[t];
      if (kind == "table") {
        s.kind = ShardKind::Table;
        if (!(in >> s.owner)) bad("table " + std::to_string(t) + ": missing owner");
      } else if (kind == "row" || kind == "column") {
        s.kind = kind == "row" ? ShardKind::Row : ShardKind::Column;
        if (p.world_size < 1 || p.world_size > (1 << 20)) bad("world_size out of range");
        s.bounds.resize(static_cast<std::size_t>(p.world_size) + 1);
        for (auto& b : s.bounds)
          if (!(in >> b)) bad("table " + std::to_string(t) + ": missing bounds");
      } else {
        bad("table " + std::to_string(t) + ": unknown kind '" + kind + "'");
      }
    }
    p.validate();
    return p;
  }

  /// Writes to_string() to `path` atomically (temporary file, rename). Throws
  /// std::system_error on I/O failure.
  void save(const std::filesystem::path& path) const {
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << to_string();
      f.flush();
      if (!f) throw std::system_error(errno, std::generic_category(), "ShardingPlan::save: " + tmp.string());
    }
    std::filesystem::rename(tmp, path);
  }
  /// Reads and parses a saved plan. Throws std::system_error (unreadable) or
  /// std::invalid_argument (malformed).
  static ShardingPlan load(const std::filesystem::path& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::system_error(errno, std::generic_category(), "ShardingPlan::load: " + path.string());
    std::ostringstream s;
    s << f.rdbuf();
    return parse(s.str());
  }
};

/// Even contiguous split of [0, n) into `parts` blocks: the first n % parts blocks get one
/// more. Returns parts + 1 bounds.
inline std::vector<std::int64_t> even_bounds(std::int64_t n, int parts) {
  std::vector<std::int64_t> b(static_cast<std::size_t>(parts) + 1, 0);
  const std::int64_t base = n / parts, extra = n % parts;
  for (int r = 0; r < parts; ++r)
    b[static_cast<std::size_t>(r) + 1] = b[static_cast<std::size_t>(r)] + base + (r < extra ? 1 : 0);
  return b;
}

/// Table-wise plan: whole tables placed greedily, largest cost first (ties: lower table
/// id), each on the rank with the smallest load so far (ties: lower rank). `cost[t]`
/// is what is balanced: bytes (cost_by_bytes) or a measured lookup count per table;
/// empty = rows.
inline ShardingPlan table_wise_plan(std::vector<std::int64_t> table_rows, std::int32_t dim, int world_size,
                                    std::span<const double> cost = {}) {
  ShardingPlan p{world_size, dim, std::move(table_rows), {}};
  const std::size_t T = p.table_rows.size();
  if (!cost.empty() && cost.size() != T)
    throw std::invalid_argument("table_wise_plan: cost has " + std::to_string(cost.size()) + " entries for " +
                                std::to_string(T) + " tables");
  std::vector<double> c(T);
  for (std::size_t t = 0; t < T; ++t) c[t] = cost.empty() ? static_cast<double>(p.table_rows[t]) : cost[t];
  std::vector<std::size_t> order(T);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return c[a] > c[b]; });
  std::vector<double> load(static_cast<std::size_t>(std::max(world_size, 1)), 0.0);
  p.tables.resize(T);
  for (std::size_t t : order) {
    const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    p.tables[t] = {ShardKind::Table, static_cast<int>(r), {}};
    load[r] += c[t];
  }
  p.validate();
  return p;
}

/// Cost per table = rows x bytes per stored row (for table_wise_plan).
inline std::vector<double> cost_by_bytes(std::span<const std::int64_t> table_rows, std::size_t row_bytes) {
  std::vector<double> c;
  for (auto r : table_rows) c.push_back(static_cast<double>(r) * static_cast<double>(row_bytes));
  return c;
}

/// Cost per table = lookups measured on a sample batch (CSR as CachedEmbedding takes it:
/// T*B + 1 offsets, table-major), for table_wise_plan. Throws std::invalid_argument if
/// offsets.size() - 1 is not a multiple of num_tables.
inline std::vector<double> cost_by_lookups(std::span<const std::int64_t> offsets, std::size_t num_tables) {
  if (offsets.empty() || num_tables == 0 || (offsets.size() - 1) % num_tables != 0)
    throw std::invalid_argument("cost_by_lookups: offsets.size() = " + std::to_string(offsets.size()) +
                                " is not T*B + 1 for T = " + std::to_string(num_tables));
  const std::size_t B = (offsets.size() - 1) / num_tables;
  std::vector<double> c(num_tables);
  for (std::size_t t = 0; t < num_tables; ++t)
    c[t] = static_cast<double>(offsets[(t + 1) * B] - offsets[t * B]);
  return c;
}

/// Row-wise plan: every table's rows in world_size contiguous blocks (even_bounds).
inline ShardingPlan row_wise_plan(std::vector<std::int64_t> table_rows, std::int32_t dim, int world_size) {
  ShardingPlan p{world_size, dim, std::move(table_rows), {}};
  for (auto r : p.table_rows) p.tables.push_back({ShardKind::Row, 0, even_bounds(r, world_size)});
  p.validate();
  return p;
}

/// Column-wise plan: every table's D columns in world_size contiguous blocks
/// (even_bounds; a rank gets no columns when D < world_size).
inline ShardingPlan column_wise_plan(std::vector<std::int64_t> table_rows, std::int32_t dim, int world_size) {
  ShardingPlan p{world_size, dim, std::move(table_rows), {}};
  for (std::size_t t = 0; t < p.table_rows.size(); ++t)
    p.tables.push_back({ShardKind::Column, 0, even_bounds(dim, world_size)});
  p.validate();
  return p;
}

/// Mixed plan in TorchRec's spirit: a table holding more than `row_share` of an even
/// per-rank share of all rows (rows > row_share * total / world_size) is split row-wise
/// over every rank; the others are placed table-wise, greedily by rows on top of the
/// row-wise load (which is even). With world_size 1 everything is table-wise.
inline ShardingPlan auto_plan(std::vector<std::int64_t> table_rows, std::int32_t dim, int world_size,
                              double row_share = 0.5) {
  ShardingPlan p{world_size, dim, table_rows, {}};
  const std::size_t T = table_rows.size();
  double total = 0;
  for (auto r : table_rows) total += static_cast<double>(r);
  std::vector<double> load(static_cast<std::size_t>(std::max(world_size, 1)), 0.0);
  p.tables.resize(T);
  std::vector<std::size_t> rest;
  for (std::size_t t = 0; t < T; ++t) {
    if (world_size > 1 && static_cast<double>(table_rows[t]) > row_share * total / world_size) {
      p.tables[t] = {ShardKind::Row, 0, even_bounds(table_rows[t], world_size)};
      for (int r = 0; r < world_size; ++r)
        load[static_cast<std::size_t>(r)] +=
            static_cast<double>(p.tables[t].bounds[static_cast<std::size_t>(r) + 1] -
                                p.tables[t].bounds[static_cast<std::size_t>(r)]);
    } else {
      rest.push_back(t);
    }
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [&](std::size_t a, std::size_t b) { return table_rows[a] > table_rows[b]; });
  for (std::size_t t : rest) {
    const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    p.tables[t] = {ShardKind::Table, static_cast<int>(r), {}};
    load[r] += static_cast<double>(table_rows[t]);
  }
  p.validate();
  return p;
}

/// The plan named `name`, as train_dlrm's `--shard` spells it, for tables of
/// `table_rows` (T) rows at dim D over `world_size` ranks: "table" (table_wise_plan by rows,
/// which places tables as cost_by_bytes does when every row has the same bytes), "row"
/// (row_wise_plan), "column" (column_wise_plan) or "auto" (auto_plan, default row share).
/// Throws std::invalid_argument naming `name` when it is none of these (and whatever the
/// planner throws for its arguments).
inline ShardingPlan plan_by_name(std::string_view name, std::vector<std::int64_t> table_rows,
                                 std::int32_t dim, int world_size) {
  if (name == "table") return table_wise_plan(std::move(table_rows), dim, world_size);
  if (name == "row") return row_wise_plan(std::move(table_rows), dim, world_size);
  if (name == "column") return column_wise_plan(std::move(table_rows), dim, world_size);
  if (name == "auto") return auto_plan(std::move(table_rows), dim, world_size);
  throw std::invalid_argument("plan_by_name: name = \"" + std::string(name) +
                              "\" is not a plan (table, row, column or auto)");
}

}  // namespace mpe::sharded
