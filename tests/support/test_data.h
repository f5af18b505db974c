#pragma once
// Data helpers shared by the layer tests. Header-only: the Fashion-MNIST
// directory comes from each test target's TANDEM_FASHION_MNIST_DIR.

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"
#include "tandem/data/fashion_mnist.h"

namespace tandem::testing {

#ifdef TANDEM_FASHION_MNIST_DIR
// Loaded once per test program.
inline const data::FashionMnist& fashion() {
  static const data::FashionMnist d = data::load_fashion_mnist(TANDEM_FASHION_MNIST_DIR);
  return d;
}
#endif

// The rows as a dataset reshuffled every pass (epoch) from `seed`, as the
// CLI trains on Fashion-MNIST.
inline data::Dataset shuffled(const data::LabeledImages& d, uint64_t seed = 0) {
  return data::as_dataset(d).shuffle(d.size(), seed);
}

// Every value of an integer feature over one pass of the dataset, in order.
inline std::vector<int32_t> drain(const data::Dataset& d, const std::string& feature = "index") {
  std::vector<int32_t> out;
  data::Iterator it = d.iterator();
  while (auto e = it.next()) {
    const std::vector<int32_t> values = e->at(feature).to_ints();
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

}  // namespace tandem::testing
