// Every row of the op table (tests/support/op_table.h): the forward against
// its double-precision reference in f32 and in each low-precision dtype the op
// takes, and the gradients of every differentiable input against central
// differences of the double reference; then that every public kernel has a row.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "support/gradcheck.h"
#include "support/op_table.h"
#include "support/reference.h"

namespace tandem {
namespace {

using testing::as_doubles;
using testing::Doubles;
using testing::expect_close;
using testing::op_cases;
using testing::OpCase;
using testing::to_doubles;

// ||actual - expected||_2 <= tolerance * max(1, ||expected||_2): for results
// whose every step rounds to a low-precision dtype, where single elements
// near zero carry the rounding of their larger neighbours.
void expect_normwise_close(const Doubles& actual, const Doubles& expected, double tolerance,
                           const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    diff += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  EXPECT_LE(std::sqrt(diff), tolerance * std::max(1.0, std::sqrt(norm)))
      << what << ": relative error " << std::sqrt(diff / std::max(norm, 1e-300));
}

double low_precision_tolerance(DType dtype) {
  // About four units in the last place of an O(1) result (bf16 2^-8, f16 2^-11);
  // the largest seen on Zen 4 were 5.7e-3 and 4.6e-4.
  return dtype == DType::bf16 ? 1.6e-2 : 2e-3;
}

// Runs the row in `dtype` and checks the forward and, where the row has
// them, the gradients against the double reference on the same inputs.
void check_row(const OpCase& op, DType dtype) {
  SCOPED_TRACE(dtype_name(dtype));
  const bool exact = dtype == DType::f32;
  const double tolerance = exact ? op.tolerance : low_precision_tolerance(dtype);
  const std::vector<Variable> inputs = testing::op_inputs(op, dtype);
  const std::vector<Doubles> x = as_doubles(inputs);
  const Variable y = op.run(inputs);
  const Doubles expected = op.reference(x);
  ASSERT_EQ(y.value().numel(), static_cast<int64_t>(expected.size())) << "forward size";
  const std::string forward = std::string("forward in ") + std::string(dtype_name(dtype));
  if (exact)
    expect_close(to_doubles(y.value()), expected, tolerance, tolerance, forward.c_str());
  else
    expect_normwise_close(to_doubles(y.value()), expected, tolerance, forward);
  if (!op.gradient) return;

  const Tensor weights = testing::projection_weights(op, y.shape(), y.dtype());
  y.backward(weights);
  const std::vector<Doubles> grads = testing::reference_gradients(op, x, to_doubles(weights));
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    const std::string what =
        "gradient of input " + std::to_string(k) + " in " + std::string(dtype_name(dtype));
    ASSERT_TRUE(inputs[k].has_grad()) << what << ": none";
    if (exact)
      expect_close(to_doubles(inputs[k].grad()), grads[k], tolerance, tolerance, what.c_str());
    else
      expect_normwise_close(to_doubles(inputs[k].grad()), grads[k], 1.5 * tolerance, what);
  }
}

class OpTable : public ::testing::TestWithParam<size_t> {};

TEST_P(OpTable, MatchesTheDoubleReferenceForwardAndBackward) {
  const OpCase& op = op_cases()[GetParam()];
  SCOPED_TRACE(op.name);
  check_row(op, DType::f32);
  for (DType d : op.low_precision) check_row(op, d);
}

std::string row_name(const ::testing::TestParamInfo<size_t>& info) {
  std::string name = op_cases()[info.param].name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Rows, OpTable, ::testing::Range<size_t>(0, op_cases().size()), row_name);

// A written-out gradient reference is itself checked: against central
// differences, on every row of it small enough for both.
TEST(OpTable, AnalyticGradientsMatchCentralDifferences) {
  size_t checked = 0;
  for (const OpCase& op : op_cases()) {
    if (!op.gradient_reference) continue;
    const std::vector<Doubles> x = as_doubles(testing::op_inputs(op, DType::f32));
    size_t elements = 0;
    for (const Doubles& v : x) elements += v.size();
    if (elements > 2000) continue;
    SCOPED_TRACE(op.name);
    const auto n = static_cast<int64_t>(op.reference(x).size());
    const Doubles weights = to_doubles(testing::projection_weights(op, Shape{n}, DType::f32));
    const std::vector<Doubles> analytic = op.gradient_reference(x, weights);
    const std::vector<Doubles> numeric = testing::central_differences(op, x, weights);
    ASSERT_EQ(analytic.size(), numeric.size());
    for (size_t k = 0; k < analytic.size(); ++k)
      expect_close(analytic[k], numeric[k], 1e-6, 1e-6, ("input " + std::to_string(k)).c_str());
    ++checked;
  }
  EXPECT_GE(checked, 8u) << "rows with a written-out gradient small enough to check";
}

TEST(OpTable, RowNamesAreUnique) {
  std::set<std::string> names;
  for (const OpCase& op : op_cases())
    EXPECT_TRUE(names.insert(op.name).second) << "two rows are called " << op.name;
}

// Functions the kernel headers declare that compute nothing on tensors: names,
// shape arithmetic, settings and counters. Each is tested where it is used.
const std::set<std::string> kNotKernels = {"activation_name",
                                           "parse_activation",
                                           "unary_op_name",
                                           "broadcastable",
                                           "normalize_axis",
                                           "inverse_permutation",
                                           "conv2d_output_shape",
                                           "pool2d_output_shape",
                                           "attention_heads_per_group",
                                           "batch_norm_fuses_relu",
                                           "batch_norm_fuses_add_relu",
                                           "conv2d_max_pool_fuses",
                                           "backend_info",
                                           "flops_executed",
                                           "count_flops",
                                           "measure_matmul_peak",
                                           "set_matmul_allow_tf32",
                                           "matmul_allow_tf32"};

// The functions declared at namespace scope in a header's text.
std::set<std::string> declared_functions(const std::string& header) {
  static const std::regex declaration(R"(^[A-Za-z_][\w:<>, ]*[\s&*](\w+)\()");
  std::set<std::string> names;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, declaration)) names.insert(m[1]);
  }
  return names;
}

std::vector<std::string> kernels_without_rows(const std::set<std::string>& declared) {
  std::set<std::string> covered;
  for (const OpCase& op : op_cases()) covered.insert(op.kernels.begin(), op.kernels.end());
  std::vector<std::string> missing;
  for (const std::string& name : declared)
    if (!covered.contains(name) && !kNotKernels.contains(name)) missing.push_back(name);
  return missing;
}

TEST(OpTable, EveryPublicKernelHasARow) {
  std::set<std::string> declared;
  const std::filesystem::path dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "src/tandem/kernels";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".h") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    declared.merge(declared_functions(text.str()));
  }
  ASSERT_GT(declared.size(), 60u) << "the headers' declarations were not found in " << dir;
  for (const std::string& name : kernels_without_rows(declared))
    ADD_FAILURE() << "kernels::" << name
                  << " has no row in the op table (tests/support/op_rows_*.cc)";
  // Names a row claims must be kernels: a typo would otherwise hide a gap.
  for (const OpCase& op : op_cases())
    for (const std::string& name : op.kernels)
      EXPECT_TRUE(declared.contains(name)) << op.name << " names no kernel " << name;
}

TEST(OpTable, APlantedKernelWithoutARowIsFound) {
  const std::set<std::string> declared = declared_functions(
      "// a comment(x)\nTensor relu(const Tensor& x);\nstd::vector<int> planted_kernel(int x);\n"
      "  Tensor indented_member(int);\nstruct Result {\n");
  EXPECT_EQ(declared, (std::set<std::string>{"planted_kernel", "relu"}));
  EXPECT_EQ(kernels_without_rows(declared), std::vector<std::string>{"planted_kernel"});
}

}  // namespace
}  // namespace tandem
