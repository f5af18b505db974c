#pragma once
// Element types. The enumerator names are the user-facing strings ("f32",
// "bf16", ...) used by flags, logs and checkpoint metadata.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

// i64 is a storage and interchange type (numpy's and PyTorch's default
// integer): tensors hold, copy and convert it exactly; kernels and
// collectives take i32 and refuse it by name. New dtypes go at the end:
// files and frames store the enumerator's value.
enum class DType : uint8_t { f32, bf16, f16, i32, u8, i64 };

// Whether `code` is the value of a DType (a byte read from a file or frame).
bool is_dtype_code(uint64_t code);
// Bytes per element.
size_t dtype_size(DType dtype);
// "f32", "bf16", "f16", "i32", "u8", "i64".
std::string_view dtype_name(DType dtype);
// Parses a dtype name; also accepts "float32", "bfloat16", "float16", "int32",
// "uint8", "int64". Throws InvalidArgument naming the accepted values.
DType parse_dtype(std::string_view name);
// f32, bf16 and f16.
bool is_floating(DType dtype);

std::ostream& operator<<(std::ostream& out, DType dtype);

}  // namespace tandem
