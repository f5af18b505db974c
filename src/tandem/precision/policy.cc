#include "tandem/precision/policy.h"

#include "tandem/base/error.h"
#include "tandem/base/name_table.h"

namespace tandem::precision {
namespace {

constexpr NameTable<Policy, 3> kPolicies{"precision policy",
                                         {{{Policy::float32, "float32"},
                                           {Policy::mixed_bfloat16, "mixed_bfloat16"},
                                           {Policy::mixed_float16, "mixed_float16"}}}};

}  // namespace

std::string_view policy_name(Policy policy) {
  return kPolicies.name(policy);
}

Policy parse_policy(std::string_view name) {
  return kPolicies.parse(name);
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
