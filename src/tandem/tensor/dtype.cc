#include "tandem/tensor/dtype.h"

#include <ostream>

#include "tandem/base/error.h"

namespace tandem {

bool is_dtype_code(uint64_t code) {
  return code <= static_cast<uint64_t>(DType::i64);
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::u8:
      return 1;
  }
  TANDEM_THROW(InvalidArgument, "invalid dtype value ", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::u8:
      return "u8";
    case DType::i64:
      return "i64";
  }
  return "invalid";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16") return DType::f16;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "u8" || name == "uint8") return DType::u8;
  if (name == "i64" || name == "int64") return DType::i64;
  TANDEM_THROW(InvalidArgument, "unknown dtype '", name,
               "' (expected f32, bf16, f16, i32, u8 or i64)");
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

std::ostream& operator<<(std::ostream& out, DType dtype) {
  return out << dtype_name(dtype);
}

}  // namespace tandem
