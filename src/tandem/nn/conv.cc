#include "tandem/nn/conv.h"

#include <cmath>

#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"
#include "tandem/nn/init.h"

namespace tandem::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
               const Conv2dOptions& options, Generator& generator)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_(options) {
  if (in_channels <= 0 || out_channels <= 0 || kernel_size <= 0 || options.stride <= 0 ||
      options.padding < 0 || options.dilation <= 0) {
    TANDEM_THROW(InvalidArgument,
                 "Conv2d: channels, kernel, stride and dilation must be positive "
                 "and padding non-negative, got ",
                 in_channels, " -> ", out_channels, " kernel ", kernel_size, " stride ",
                 options.stride, " padding ", options.padding);
  }
  // The shape first: it refuses sizes whose product passes INT64_MAX
  // (ShapeError), which bounds fan_in's product too.
  const Shape shape{kernel_size, kernel_size, in_channels, out_channels};
  const int64_t fan_in = kernel_size * kernel_size * in_channels;
  Tensor w = Tensor::empty(shape, DType::f32, current_device(), MemoryCategory::parameters);
  init::kaiming_uniform(w, fan_in, std::sqrt(5.0f), generator);
  weight_ = register_parameter("weight", w);
  if (options.bias) {
    Tensor b = Tensor::empty(Shape{out_channels}, DType::f32, current_device(),
                             MemoryCategory::parameters);
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    init::uniform(b, -bound, bound, generator);
    bias_ = register_parameter("bias", b);
  }
}

Variable Conv2d::forward(const Variable& input) {
  return conv2d(input, weight_, bias_, op_options(options_.activation));
}

Variable Conv2d::forward_max_pool_relu(const Variable& input, const kernels::Pool2dGeometry& pool) {
  return conv2d_max_pool_relu(input, weight_, bias_, op_options(kernels::Activation::none), pool);
}

tandem::Conv2dOptions Conv2d::op_options(kernels::Activation activation) const {
  tandem::Conv2dOptions op;
  op.geometry = {.stride_h = options_.stride,
                 .stride_w = options_.stride,
                 .pad_h = options_.padding,
                 .pad_w = options_.padding,
                 .dilation_h = options_.dilation,
                 .dilation_w = options_.dilation};
  op.activation = activation;
  op.compute_dtype = options_.compute_dtype;
  op.output_dtype = options_.output_dtype;
  return op;
}

std::vector<int> Conv2d::torch_axes(const std::string& local_name) const {
  if (local_name == "weight") return {3, 2, 0, 1};
  return {};
}

std::string Conv2d::describe() const {
  std::string text = "Conv2d(" + std::to_string(in_channels_) + " -> " +
                     std::to_string(out_channels_) + ", " + std::to_string(kernel_size_) + "x" +
                     std::to_string(kernel_size_);
  if (options_.stride != 1) text += ", stride " + std::to_string(options_.stride);
  if (options_.padding != 0) text += ", pad " + std::to_string(options_.padding);
  if (options_.activation != kernels::Activation::none) {
    text += ", " + std::string(kernels::activation_name(options_.activation));
  }
  if (options_.compute_dtype != DType::f32)
    text += ", " + std::string(dtype_name(options_.compute_dtype));
  return text + ")";
}

Pool2d::Pool2d(const char* name, int64_t kernel_size, int64_t stride, int64_t padding)
    : name_(name) {
  if (kernel_size <= 0 || stride < 0 || padding < 0) {
    TANDEM_THROW(InvalidArgument, name, ": bad kernel ", kernel_size, " stride ", stride,
                 " padding ", padding);
  }
  const int64_t s = stride == 0 ? kernel_size : stride;
  geometry_ = {.kernel_h = kernel_size,
               .kernel_w = kernel_size,
               .stride_h = s,
               .stride_w = s,
               .pad_h = padding,
               .pad_w = padding};
}

std::string Pool2d::describe() const {
  return std::string(name_) + "(" + std::to_string(geometry_.kernel_h) + "x" +
         std::to_string(geometry_.kernel_w) + ", stride " + std::to_string(geometry_.stride_h) +
         ")";
}

Variable MaxPool2d::forward(const Variable& input) {
  return max_pool2d(input, geometry_);
}

std::optional<Variable> max_pool_then_relu(Module& first, Module& second, const Variable& x) {
  auto* conv = dynamic_cast<Conv2d*>(&first);
  auto* pool = dynamic_cast<MaxPool2d*>(&second);
  if (conv == nullptr || pool == nullptr || conv->activation() != kernels::Activation::relu)
    return std::nullopt;
  return conv->forward_max_pool_relu(x, pool->geometry());
}

Variable AvgPool2d::forward(const Variable& input) {
  return avg_pool2d(input, geometry_);
}

Variable GlobalAvgPool::forward(const Variable& input) {
  return global_avg_pool(input);
}

GraphValue Conv2d::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  // ONNX's Conv takes PyTorch's (O, C, KH, KW) weights.
  std::vector<std::string> inputs = {x.name, graph.weight(weight_.value(), torch_axes("weight"))};
  if (options_.bias) inputs.push_back(graph.weight(bias_.value()));
  const int64_t p = options_.padding;
  const GraphValue y =
      graph.op("Conv", inputs, 4,
               {{"kernel_shape", std::vector<int64_t>{kernel_size_, kernel_size_}},
                {"strides", std::vector<int64_t>{options_.stride, options_.stride}},
                {"pads", std::vector<int64_t>{p, p, p, p}},
                {"dilations", std::vector<int64_t>{options_.dilation, options_.dilation}}});
  return activation_to_graph(graph, y, options_.activation);
}

GraphValue Pool2d::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  const kernels::Pool2dGeometry& g = geometry_;
  std::vector<GraphAttribute> attributes = {
      {"kernel_shape", std::vector<int64_t>{g.kernel_h, g.kernel_w}},
      {"strides", std::vector<int64_t>{g.stride_h, g.stride_w}},
      {"pads", std::vector<int64_t>{g.pad_h, g.pad_w, g.pad_h, g.pad_w}}};
  const bool average = std::string(name_) == "AvgPool2d";
  if (average) attributes.push_back({"count_include_pad", int64_t{1}});
  return graph.op(average ? "AveragePool" : "MaxPool", {x.name}, 4, attributes);
}

GraphValue GlobalAvgPool::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  const GraphValue pooled = graph.op("GlobalAveragePool", {x.name}, 4);  // (N, C, 1, 1)
  return graph.op("Flatten", {pooled.name}, 2, {{"axis", int64_t{1}}});
}

}  // namespace tandem::nn
