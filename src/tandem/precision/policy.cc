#include "tandem/precision/policy.h"

#include "tandem/base/error.h"

namespace tandem::precision {
namespace {}  // namespace
std::string_view policy_name(Policy policy) {
  switch (policy) {
    case Policy::float32:
      return "float32";
    case Policy::mixed_bfloat16:
      return "mixed_bfloat16";
    case Policy::mixed_float16:
      return "mixed_float16";
  }
  return "invalid";
}

Policy parse_policy(std::string_view name) {
  if (name == "float32") return Policy::float32;
  if (name == "mixed_bfloat16") return Policy::mixed_bfloat16;
  if (name == "mixed_float16") return Policy::mixed_float16;
  TANDEM_THROW(InvalidArgument, "unknown precision policy '", name,
               "' (expected float32, mixed_bfloat16 or mixed_float16)");
}

DType compute_dtype(Policy policy) {
  switch (policy) {
    case Policy::mixed_bfloat16:
      return DType::bf16;
    case Policy::mixed_float16:
      return DType::f16;
    default:
      return DType::f32;
  }
}

DType matrix_dtype(Policy policy) {
  return policy == Policy::mixed_bfloat16 ? DType::bf16 : DType::f32;
}

nn::ModelOptions model_options(Policy policy, nn::ModelOptions base) {
  base.compute_dtype = matrix_dtype(policy);
  base.activation_dtype =
      policy == Policy::float32 ? std::nullopt : std::optional<DType>(compute_dtype(policy));
  return base;
}

}  // namespace tandem::precision
