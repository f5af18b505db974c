#include "tandem/interop/onnx_export.h"

#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <string_view>

#include "tandem/base/atomic_file.h"
#include "tandem/base/error.h"
#include "tandem/kernels/layout.h"
#include "tandem/nn/graph_builder.h"
#include "tandem/tensor/tensor.h"

namespace tandem::interop {
namespace {

class OnnxGraph : public nn::GraphBuilder {
 public:
  OnnxGraph(onnx::GraphProto& graph, nn::Module& model) : graph_(graph) {
    // Weights are named after the parameter or buffer whose storage they share.
    for (const nn::Module::StateTensor& s : model.named_state())
      names_[s.value.raw_data()] = s.name;
  }

  nn::GraphValue op(const std::string& type, const std::vector<std::string>& inputs,
                    int output_rank, const std::vector<nn::GraphAttribute>& attributes) override {
    onnx::NodeProto& node = *graph_.add_node();
    const std::string output = "v" + std::to_string(++values_);
    node.set_op_type(type);
    node.set_name(fmt::format("{}_{}", type, values_));
    for (const std::string& in : inputs) node.add_input(in);
    node.add_output(output);
    for (const nn::GraphAttribute& a : attributes) {
      onnx::AttributeProto& attribute = *node.add_attribute();
      attribute.set_name(a.name);
      if (const auto* i = std::get_if<int64_t>(&a.value)) {
        attribute.set_type(onnx::AttributeProto::INT);
        attribute.set_i(*i);
      } else if (const auto* f = std::get_if<float>(&a.value)) {
        attribute.set_type(onnx::AttributeProto::FLOAT);
        attribute.set_f(*f);
      } else {
        attribute.set_type(onnx::AttributeProto::INTS);
        for (int64_t v : std::get<std::vector<int64_t>>(a.value)) attribute.add_ints(v);
      }
    }
    return {output, output_rank};
  }

  std::string weight(const Tensor& weight, std::span<const int> axes) override {
    const auto known = names_.find(weight.raw_data());
    const std::string name =
        known != names_.end() ? known->second : "constant_" + std::to_string(++constants_);
    if (written_.insert(name).second) {
      Tensor value = weight.to(DType::f32);
      if (!axes.empty()) value = kernels::permute(value, axes);
      add_initializer(name, value);
    }
    return name;
  }

  std::string scalar(float value) override {
    const std::string name = "constant_" + std::to_string(++constants_);
    add_initializer(name, Tensor::from_floats(Shape{}, std::vector<float>{value}));
    return name;
  }

  std::string integers(const std::vector<int64_t>& values) override {
    const std::string name = "constant_" + std::to_string(++constants_);
    onnx::TensorProto& t = *graph_.add_initializer();
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::INT64);
    t.add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t.add_int64_data(v);
    return name;
  }

 private:
  void add_initializer(const std::string& name, const Tensor& value) {
    onnx::TensorProto& t = *graph_.add_initializer();
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : value.shape().to_vector()) t.add_dims(d);
    t.set_raw_data(value.raw_data(), value.nbytes());  // little-endian f32, as ONNX's raw_data
  }

  onnx::GraphProto& graph_;
  std::map<const void*, std::string> names_;
  std::set<std::string> written_;
  int values_ = 0;
  int constants_ = 0;
};

void set_type(onnx::ValueInfoProto& info, onnx::TensorProto::DataType type,
              const std::vector<std::string>& dims_as_text, const std::vector<int64_t>& dims) {
  onnx::TypeProto_Tensor& tensor = *info.mutable_type()->mutable_tensor_type();
  tensor.set_elem_type(type);
  onnx::TensorShapeProto& shape = *tensor.mutable_shape();
  for (const std::string& p : dims_as_text) shape.add_dim()->set_dim_param(p);
  for (int64_t d : dims) shape.add_dim()->set_dim_value(d);
}

}  // namespace

std::string onnx_model(nn::Module& model, const Shape& example_shape, DType input_dtype,
                       bool any_image_size) {
  if (input_dtype != DType::f32 && input_dtype != DType::i32) {
    TANDEM_THROW(InvalidArgument, "ONNX export: inputs are f32 features or i32 tokens, got ",
                 dtype_name(input_dtype));
  }
  const bool tokens = input_dtype == DType::i32;
  if (tokens && example_shape.rank() != 1) {
    TANDEM_THROW(InvalidArgument, "ONNX export: token inputs are sequences (T), got example shape ",
                 example_shape.to_string());
  }
  onnx::ModelProto proto;
  proto.set_ir_version(onnx::IR_VERSION);
  proto.set_producer_name("tandem");
  proto.set_doc_string("tandem inference graph: input (N, ...) channels-last, output logits");
  onnx::OperatorSetIdProto& opset = *proto.add_opset_import();
  opset.set_domain("");
  opset.set_version(kOnnxOpset);
  onnx::GraphProto& graph = *proto.mutable_graph();
  graph.set_name("tandem");
  // Tokens are int64, ONNX's index type, and sequences may be shorter than
  // the context: (N, T) with both symbolic.
  if (tokens) {
    set_type(*graph.add_input(), onnx::TensorProto::INT64, {"N", "T"}, {});
  } else if (any_image_size) {
    if (example_shape.rank() != 3) {
      TANDEM_THROW(InvalidArgument, "ONNX export: images of any size are (H, W, C), got ",
                   example_shape.to_string());
    }
    set_type(*graph.add_input(), onnx::TensorProto::FLOAT, {"N", "H", "W"}, {example_shape[2]});
  } else {
    set_type(*graph.add_input(), onnx::TensorProto::FLOAT, {"N"}, example_shape.to_vector());
  }
  graph.mutable_input(0)->set_name("input");

  OnnxGraph onnx_graph(graph, model);
  nn::GraphBuilder& builder = onnx_graph;
  const int rank = example_shape.rank() + 1;
  nn::GraphValue x{"input", rank};
  // Inside the graph images are (N, C, H, W), as ONNX's Conv expects.
  if (rank == 4 && !tokens)
    x = builder.op("Transpose", {x.name}, 4, {{"perm", std::vector<int64_t>{0, 3, 1, 2}}});
  const nn::GraphValue y = model.to_graph(builder, x);
  if (y.rank == 4) {
    TANDEM_THROW(InvalidArgument,
                 "ONNX export: the model's output is rank 4 (images); tandem exports models "
                 "that end in logits");
  }
  builder.op("Identity", {y.name}, y.rank);
  onnx::NodeProto& last = *graph.mutable_node(graph.node_size() - 1);
  last.set_output(0, "logits");
  onnx::ValueInfoProto& output = *graph.add_output();
  output.set_name("logits");
  std::vector<std::string> symbolic(static_cast<size_t>(y.rank), "");
  symbolic[0] = "N";
  for (int i = 1; i < y.rank; ++i) symbolic[static_cast<size_t>(i)] = "D" + std::to_string(i);
  set_type(output, onnx::TensorProto::FLOAT, symbolic, {});
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception& e) {
    TANDEM_THROW(InvalidArgument, "ONNX export: the checker refused the graph: ", e.what());
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) TANDEM_THROW(Error, "ONNX export: serialisation failed");
  return bytes;
}

void export_onnx(nn::Module& model, const Shape& example_shape, DType input_dtype,
                 const std::string& path, bool any_image_size) {
  const std::string bytes = onnx_model(model, example_shape, input_dtype, any_image_size);
  const std::string_view parts[] = {bytes};
  write_file_atomically(path, parts, "ONNX model");
}

}  // namespace tandem::interop
