#include "tandem/nn/models.h"

#include "tandem/base/error.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"

namespace tandem::nn {

using kernels::Activation;

std::optional<DType> last_layer_output_dtype(const ModelOptions& options) {
  if (options.float32_outputs && options.activation_dtype) return DType::f32;
  return options.activation_dtype;
}

std::shared_ptr<Sequential> make_cnn(const ModelOptions& options) {
  Generator generator(options.seed);
  const Conv2dOptions conv{.padding = 1,
                           .activation = Activation::relu,
                           .compute_dtype = options.compute_dtype,
                           .output_dtype = options.activation_dtype};
  const LinearOptions hidden{.activation = Activation::relu,
                             .compute_dtype = options.compute_dtype,
                             .output_dtype = options.activation_dtype};
  const LinearOptions logits{.compute_dtype = options.compute_dtype,
                             .output_dtype = last_layer_output_dtype(options)};
  auto model = std::make_shared<Sequential>();
  model->emplace<Conv2d>(1, 32, 3, conv, generator)
      .emplace<MaxPool2d>(2)
      .emplace<Conv2d>(32, 64, 3, conv, generator)
      .emplace<MaxPool2d>(2)
      .emplace<Flatten>()
      .emplace<Linear>(3136, 128, hidden, generator)
      .emplace<Linear>(128, 10, logits, generator);
  return model;
}

std::shared_ptr<Sequential> make_mlp(const ModelOptions& options) {
  Generator generator(options.seed);
  const LinearOptions hidden{.activation = Activation::relu,
                             .compute_dtype = options.compute_dtype,
                             .output_dtype = options.activation_dtype};
  const LinearOptions logits{.compute_dtype = options.compute_dtype,
                             .output_dtype = last_layer_output_dtype(options)};
  auto model = std::make_shared<Sequential>();
  model->emplace<Flatten>()
      .emplace<Linear>(784, 512, hidden, generator)
      .emplace<Linear>(512, 512, hidden, generator)
      .emplace<Linear>(512, 10, logits, generator);
  return model;
}

void check_model_options(const ModelOptions& options) {
  if (options.compute_dtype != DType::f32 && options.compute_dtype != DType::bf16) {
    TANDEM_THROW(InvalidArgument, "compute dtype must be f32 or bf16, got ",
                 dtype_name(options.compute_dtype));
  }
  if (options.activation_dtype && !is_floating(*options.activation_dtype)) {
    TANDEM_THROW(InvalidArgument, "activation dtype must be f32, bf16 or f16, got ",
                 dtype_name(*options.activation_dtype));
  }
}

std::shared_ptr<Sequential> make_model(const std::string& name, const ModelOptions& options) {
  check_model_options(options);
  if (name == "cnn") return make_cnn(options);
  if (name == "mlp") return make_mlp(options);
  TANDEM_THROW(InvalidArgument, "unknown model '", name, "' (expected cnn or mlp)");
}

std::vector<std::string> model_names() {
  return {"cnn", "mlp"};
}

}  // namespace tandem::nn
