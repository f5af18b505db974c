#include "tandem/data/batching.h"

#include <cstring>
#include <numeric>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"

namespace tandem::data {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) TANDEM_THROW(InvalidArgument, "epoch_permutation: negative size ", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  Generator generator(mix_seed(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(generator.next_below(static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

Tensor gather_rows(const Tensor& source, std::span<const int64_t> rows) {
  MemoryCategoryScope input_memory(MemoryCategory::input);
  if (source.rank() < 1) TANDEM_THROW(ShapeError, "gather_rows needs rank >= 1, got a scalar");
  const int64_t available = source.dim(0);
  Tensor out = Tensor::empty(source.shape().with_dim(0, static_cast<int64_t>(rows.size())),
                             source.dtype(), source.device());
  const size_t row_bytes =
      static_cast<size_t>(source.shape().row_numel()) * dtype_size(source.dtype());
  const auto* src = static_cast<const char*>(source.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t r : rows) {
    if (r < 0 || r >= available) {
      TANDEM_THROW(InvalidArgument, "gather_rows: row ", r, " outside [0, ", available, ")");
    }
  }
  parallel_for(static_cast<int64_t>(rows.size()), 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      std::memcpy(dst + i * row_bytes, src + rows[i] * row_bytes, row_bytes);
  });
  return out;
}

}  // namespace tandem::data
