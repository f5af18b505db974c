#pragma once
// The op-case table: one row per kernel configuration, each with its inputs,
// the op run through tandem (through autograd where the op has a backward, so
// the backward kernels run too) and a naive double-precision reference of the
// forward. The rows drive tests/kernels/op_table_test.cc (the forward against
// the reference in f32, bf16 and f16; the backward against central
// differences of the double reference, so the gradient reference is exact to
// about 1e-9) and tests/gpu/gpu_test.cc (every row on a CUDA device against
// the CPU). A new kernel is one row; a public kernel without a row fails
// OpTable.EveryPublicKernelHasARow.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tandem/autograd/variable.h"

namespace tandem::testing {

using Doubles = std::vector<double>;

struct OpInput {
  enum class Kind : uint8_t {
    uniform,   // uniform in [low, high)
    distinct,  // pairwise distinct, magnitudes in [low, 1] (no ties, away from kinks)
    labels,    // i32 in [0, high), every third one `low` when low < 0 (an ignored label)
  };
  Shape shape;
  Kind kind = Kind::uniform;
  double low = -1, high = 1;
  bool differentiable = true;  // the backward is checked with respect to it
  bool follows_dtype = true;   // false: rounded to the row's dtype but kept in f32 (biases)
};

OpInput uniform(Shape shape, double low = -1, double high = 1);
// Uniform values the op takes but is not differentiated by (targets, running moments).
OpInput fixed(Shape shape, double low = -1, double high = 1);
OpInput distinct(Shape shape, double margin = 0.05);
OpInput labels(Shape shape, int classes, int ignored = 0);
// The input rounded to the row's dtype and handed over in f32 (kernels that take f32 biases).
OpInput in_f32(OpInput input);

using OpFunction = std::function<Variable(const std::vector<Variable>&)>;
using Reference = std::function<Doubles(const std::vector<Doubles>&)>;
// The gradients of sum(reference(inputs) * weights) with respect to each
// input (empty for those not differentiated), worked out in double.
using GradientReference =
    std::function<std::vector<Doubles>(const std::vector<Doubles>&, const Doubles&)>;

struct OpCase {
  std::string name;
  // The public kernels (tandem::kernels) the row runs, forward and backward.
  std::vector<std::string> kernels;
  std::vector<OpInput> inputs;
  OpFunction run;
  Reference reference;  // on the inputs as the op saw them (rounded to its dtype)
  // Low-precision dtypes the op takes besides f32: all floating inputs are
  // rounded to it and the op runs on them.
  std::vector<DType> low_precision = {DType::bf16, DType::f16};
  // f32: |result - reference| <= tolerance * max(1, |reference|), forward and gradients.
  double tolerance = 1e-6;
  bool gradient = true;  // false: the op has no backward (or is not differentiable)
  bool gpu = true;       // its kernels have CUDA implementations
  // Output i depends on input i alone (one input, its shape): the central
  // differences perturb every element at once, so large shapes stay cheap.
  bool elementwise = false;
  // > 0: output row i (of this many elements) depends on input row i alone
  // (one input, its shape; softmax): the differences re-evaluate one row.
  int64_t row_length = 0;
  // For rows too large for central differences (each costs two forward
  // references per input element): the gradients written out.
  // OpTable.AnalyticGradientsMatchCentralDifferences checks each against
  // the differences on the rows small enough for both.
  GradientReference gradient_reference;
};

const std::vector<OpCase>& op_cases();

// The row's inputs in `dtype` (labels stay i32), drawn from a seed of the
// row's name: the same values every call, whatever rows come before it.
std::vector<Variable> op_inputs(const OpCase& op, DType dtype);
std::vector<Doubles> as_doubles(const std::vector<Variable>& inputs);

// d/dx_j of sum_i reference(x)_i * weights_i for each differentiable input
// (empty for the others): the row's gradient_reference where it has one,
// else central differences in double.
std::vector<Doubles> reference_gradients(const OpCase& op, const std::vector<Doubles>& inputs,
                                         const Doubles& weights);
std::vector<Doubles> central_differences(const OpCase& op, const std::vector<Doubles>& inputs,
                                         const Doubles& weights);

// The projection weights a row's output is differentiated against.
Tensor projection_weights(const OpCase& op, const Shape& shape, DType dtype);

}  // namespace tandem::testing
