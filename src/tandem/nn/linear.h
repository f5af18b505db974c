#pragma once
// Linear (Dense): y = act(x W^T + b), W (out, in) as in PyTorch.

#include <optional>

#include "tandem/autograd/functions.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

struct LinearOptions {
  bool bias = true;
  kernels::Activation activation = kernels::Activation::none;  // fused when possible
  DType compute_dtype = DType::f32;
  std::optional<DType> output_dtype;  // default: the input's dtype
};

class Linear : public Module {
 public:
  // Throws InvalidArgument for non-positive sizes.
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {},
         Generator& generator = thread_generator());

  Variable forward(const Variable& input) override;  // (B, in) -> (B, out)
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }

 private:
  int64_t in_features_, out_features_;
  LinearOptions options_;
  Variable weight_, bias_;
};

}  // namespace tandem::nn
