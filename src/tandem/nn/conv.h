#pragma once
// Conv2d and MaxPool2d on channels-last images (N, H, W, C); Conv2d weights
// are (KH, KW, C, O).

#include <optional>

#include "tandem/autograd/functions.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  bool bias = true;
  kernels::Activation activation = kernels::Activation::none;  // fused when possible
  DType compute_dtype = DType::f32;
  std::optional<DType> output_dtype;  // default: the input's dtype
};

class Conv2d : public Module {
 public:
  // Square kernel of kernel_size; throws InvalidArgument for bad sizes.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
         const Conv2dOptions& options = {}, Generator& generator = thread_generator());

  Variable forward(const Variable& input) override;
  // relu(max_pool2d(this convolution)), its ReLU (or none) after the
  // pooling, in one op (see max_pool_then_relu and conv2d_max_pool_relu).
  Variable forward_max_pool_relu(const Variable& input, const kernels::Pool2dGeometry& pool);
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
  // The weight is (KH, KW, C, O), PyTorch's (O, C, KH, KW).
  std::vector<int> torch_axes(const std::string& local_name) const override;

  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  kernels::Activation activation() const { return options_.activation; }

 private:
  tandem::Conv2dOptions op_options(kernels::Activation activation) const;
  int64_t in_channels_, out_channels_, kernel_size_;
  Conv2dOptions options_;
  Variable weight_, bias_;
};

// A square pooling window: what MaxPool2d and AvgPool2d share.
class Pool2d : public Module {
 public:
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
  const kernels::Pool2dGeometry& geometry() const { return geometry_; }

 protected:
  // stride 0 means stride = kernel_size (PyTorch's default); throws
  // InvalidArgument, naming `name`, for a non-positive kernel or a negative
  // stride or padding.
  Pool2d(const char* name, int64_t kernel_size, int64_t stride, int64_t padding);
  kernels::Pool2dGeometry geometry_;

 private:
  const char* name_;
};

class MaxPool2d : public Pool2d {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0)
      : Pool2d("MaxPool2d", kernel_size, stride, padding) {}
  Variable forward(const Variable& input) override;
};

// `first` then `second` on x where they are a Conv2d with a ReLU and a
// MaxPool2d, with the ReLU moved after the pooling: max pooling and ReLU
// commute (values and gradients alike, ties included, as max picks the
// same position; not where the convolution's output holds a NaN, which
// wins the pooling and which the ReLU turns into 0 after it, where before
// it the window's largest other value would win), and the ReLU then runs
// inside the pooling's pass, its
// backward folded into the pooling's; nothing keeps the convolution's
// output for a ReLU's backward. A first layer's convolution (a few input
// channels) pools its own output as it computes it, which is then never
// stored (conv2d_max_pool_relu). Empty for other pairs. Sequential runs
// such pairs this way.
std::optional<Variable> max_pool_then_relu(Module& first, Module& second, const Variable& x);

// Average pooling, padding counted (PyTorch's count_include_pad=True).
class AvgPool2d : public Pool2d {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0)
      : Pool2d("AvgPool2d", kernel_size, stride, padding) {}
  Variable forward(const Variable& input) override;
};

// (N, H, W, C) -> (N, C): the mean over each image.
class GlobalAvgPool : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "GlobalAvgPool"; }
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
};

}  // namespace tandem::nn
