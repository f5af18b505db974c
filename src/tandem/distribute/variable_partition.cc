#include "tandem/distribute/variable_partition.h"

#include <algorithm>
#include <numeric>

#include "tandem/base/error.h"

namespace tandem::distribute {

std::vector<VariablePiece> partition_variables(const std::vector<Shape>& shapes, int shards,
                                               int64_t min_shard_bytes, bool split) {
  if (shards < 1)
    TANDEM_THROW(InvalidArgument, "a parameter server needs at least 1 shard, got ", shards);
  if (min_shard_bytes < 1) {
    TANDEM_THROW(InvalidArgument, "the smallest variable piece must be at least 1 byte, got ",
                 min_shard_bytes);
  }
  std::vector<size_t> order(shapes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto bytes_of = [&](size_t i) { return shapes[i].numel() * int64_t{4}; };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bytes_of(a) > bytes_of(b); });
  std::vector<int64_t> load(static_cast<size_t>(shards), 0);
  std::vector<VariablePiece> pieces;
  for (size_t v : order) {
    const Shape& shape = shapes[v];
    const int64_t rows = shape.rank() == 0 ? 1 : shape[0];
    const int64_t bytes = bytes_of(v);
    int64_t count = 1;
    if (split && shape.rank() > 0)
      count = std::max<int64_t>(1, std::min({int64_t{shards}, rows, bytes / min_shard_bytes}));
    // The `count` least-loaded shards, lowest index first among equals.
    std::vector<int> by_load(static_cast<size_t>(shards));
    std::iota(by_load.begin(), by_load.end(), 0);
    std::stable_sort(by_load.begin(), by_load.end(),
                     [&](int a, int b) { return load[a] < load[b]; });
    const int64_t row_bytes = rows == 0 ? 0 : bytes / rows;
    for (int64_t k = 0; k < count; ++k) {
      VariablePiece p;
      p.variable = v;
      p.begin = rows * k / count;
      p.end = rows * (k + 1) / count;
      p.shard = by_load[static_cast<size_t>(k)];
      p.bytes = shape.rank() == 0 ? bytes : row_bytes * (p.end - p.begin);
      load[static_cast<size_t>(p.shard)] += p.bytes;
      pieces.push_back(p);
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const VariablePiece& a, const VariablePiece& b) {
    return a.variable != b.variable ? a.variable < b.variable : a.begin < b.begin;
  });
  return pieces;
}

}  // namespace tandem::distribute
