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
#include "tandem/nn/model_file.h"
#include "tandem/nn/models.h"

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

TEST(OnnxExport, LayersWithoutAnOnnxFormAreNamed) {
  auto gpt = nn::make_model("gpt", {.settings = "layers=1,width=16,heads=2,context=8"});
  try {
    interop::onnx_model(*gpt, Shape{8});
    ADD_FAILURE() << "gpt exported";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("has no ONNX form"), std::string::npos) << e.what();
  }
  const nn::ModelDefinition d = nn::parse_model_definition(
      "input_shape = [6]\n[[layers]]\ntype = \"layer_norm\"\n[[layers]]\ntype = \"dense\"\n"
      "units = 2\n",
      "norm.toml");
  auto model = nn::build_model(d);
  try {
    interop::onnx_model(*model, Shape{6});
    ADD_FAILURE() << "layer_norm exported";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("LayerNorm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
