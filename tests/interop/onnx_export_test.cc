// ONNX export: the graph's operators, initializers named as PyTorch's
// state_dict, the input and output declared, and an error naming the layer
// for a model ONNX export cannot express. (The numbers are checked against
// onnx.checker and OpenCV's DNN module by onnx_check.py, CTest interop.onnx.)
#include "tandem/interop/onnx_export.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <map>

#include "tandem/base/error.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/model_file.h"
#include "tandem/nn/models.h"
#include "tandem/nn/sequential.h"

namespace tandem {
namespace {

onnx::ModelProto parsed(const std::string& bytes) {
  onnx::ModelProto proto;
  EXPECT_TRUE(proto.ParseFromString(bytes));
  return proto;
}

TEST(OnnxExport, TheCnnIsItsLayersWithPyTorchNamedWeights) {
  auto cnn = nn::make_model("cnn", {.seed = 1});
  const onnx::ModelProto m = parsed(interop::onnx_model(*cnn, Shape{28, 28, 1}));
  EXPECT_EQ(m.opset_import(0).version(), interop::kOnnxOpset);
  std::vector<std::string> ops;
  for (const auto& n : m.graph().node()) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Transpose", "Conv", "Relu", "MaxPool", "Conv", "Relu",
                                           "MaxPool", "Transpose", "Flatten", "Gemm", "Relu",
                                           "Gemm", "Identity"}));
  std::map<std::string, std::vector<int64_t>> initializers;
  for (const auto& t : m.graph().initializer())
    initializers[t.name()] = {t.dims().begin(), t.dims().end()};
  EXPECT_EQ(initializers.at("0.weight"), (std::vector<int64_t>{32, 1, 3, 3}));
  EXPECT_EQ(initializers.at("5.weight"), (std::vector<int64_t>{128, 3136}));
  EXPECT_EQ(initializers.size(), 8u);
  ASSERT_EQ(m.graph().input_size(), 1);
  EXPECT_EQ(m.graph().input(0).name(), "input");
  const auto& dims = m.graph().input(0).type().tensor_type().shape().dim();
  ASSERT_EQ(dims.size(), 4);
  EXPECT_EQ(dims[0].dim_param(), "N");
  EXPECT_EQ(dims[3].dim_value(), 1);
  EXPECT_EQ(m.graph().output(0).name(), "logits");
  // The weights' bytes are the model's (conv permuted to (O, C, KH, KW)).
  for (const auto& t : m.graph().initializer()) {
    if (t.name() != "6.bias") continue;
    const auto bias = cnn->named_parameters().back().second.value().to_floats();
    ASSERT_EQ(t.raw_data().size(), bias.size() * 4);
    EXPECT_EQ(std::memcmp(t.raw_data().data(), bias.data(), t.raw_data().size()), 0);
  }
}

TEST(OnnxExport, GptTakesInt64TokensOfAnyLengthAndTiesItsOutputToTheEmbedding) {
  auto gpt = nn::make_model("gpt", {.seed = 1, .settings = "layers=2,width=16,heads=2,context=8"});
  const onnx::ModelProto m = parsed(interop::onnx_model(*gpt, Shape{8}, DType::i32));
  const auto& input = m.graph().input(0).type().tensor_type();
  EXPECT_EQ(input.elem_type(), onnx::TensorProto::INT64);
  ASSERT_EQ(input.shape().dim_size(), 2);
  EXPECT_EQ(input.shape().dim(0).dim_param(), "N");
  EXPECT_EQ(input.shape().dim(1).dim_param(), "T");
  EXPECT_EQ(m.graph().output(0).type().tensor_type().shape().dim_size(), 3);
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ++ops[n.op_type()];
  EXPECT_EQ(ops["Gather"], 1);   // the token lookup
  EXPECT_EQ(ops["Softmax"], 2);  // one per block
  EXPECT_EQ(ops["Erf"], 0);      // the MLP's GELU is the tanh form
  EXPECT_EQ(ops["Tanh"], 2);
  std::map<std::string, int> initializers;
  for (const auto& t : m.graph().initializer()) ++initializers[t.name()];
  // Every parameter once, under its state_dict name; the tied output
  // projection reads the token table rather than a copy of it.
  for (const nn::Module::StateTensor& s : gpt->named_state())
    EXPECT_EQ(initializers[s.name], 1) << s.name;
  EXPECT_EQ(initializers.count("lm_head.weight"), 0u);
}

TEST(OnnxExport, TokenInputsMustBeSequences) {
  auto gpt = nn::make_model("gpt", {.settings = "layers=1,width=16,heads=2,context=8"});
  EXPECT_THROW(interop::onnx_model(*gpt, Shape{8, 2}, DType::i32), InvalidArgument);
  EXPECT_THROW(interop::onnx_model(*gpt, Shape{8}, DType::bf16), InvalidArgument);
}

// A layer of the user's own, without a to_graph.
class Scale : public nn::Module {
 public:
  Variable forward(const Variable& x) override { return x; }
  std::string describe() const override { return "Scale(custom)"; }
};

TEST(OnnxExport, LayersWithoutAnOnnxFormAreNamed) {
  nn::Sequential model;
  model.emplace<nn::Linear>(4, 4);
  model.emplace<Scale>();
  try {
    interop::onnx_model(model, Shape{4});
    ADD_FAILURE() << "a layer without an ONNX form exported";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Scale(custom) has no ONNX form"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem
