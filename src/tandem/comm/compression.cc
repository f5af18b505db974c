#include "tandem/comm/compression.h"

#include "tandem/base/error.h"
#include "tandem/comm/detail/reduce_kernels.h"
#include "tandem/tensor/convert.h"

namespace tandem::comm {

std::string_view wire_dtype_name(WireDType wire) {
  switch (wire) {
    case WireDType::f32:
      return "f32";
    case WireDType::bf16:
      return "bf16";
    case WireDType::f16:
      return "f16";
  }
  return "invalid";
}

WireDType parse_wire_dtype(std::string_view name) {
  if (name == "f32" || name == "none") return WireDType::f32;
  if (name == "bf16") return WireDType::bf16;
  if (name == "f16") return WireDType::f16;
  TANDEM_THROW(InvalidArgument, "unknown wire dtype '", name, "' (expected f32, bf16 or f16)");
}

void all_reduce_compressed(Communicator& comm, const Tensor& buffer, ReduceOp op, WireDType wire,
                           Tensor staging) {
  if (buffer.dtype() != DType::f32) {
    TANDEM_THROW(InvalidArgument, "compressed all-reduce needs an f32 buffer, got ",
                 buffer.to_string());
  }
  if (op != ReduceOp::sum && op != ReduceOp::mean) {
    TANDEM_THROW(InvalidArgument, "compressed all-reduce supports sum and mean, got ",
                 reduce_op_name(op));
  }
  if (wire == WireDType::f32) {
    comm.all_reduce(buffer, op);
    return;
  }
  const DType dtype = wire == WireDType::bf16 ? DType::bf16 : DType::f16;
  if (!staging.defined()) {
    staging =
        Tensor::empty(Shape{buffer.numel()}, dtype, buffer.device(), MemoryCategory::communication);
  } else if (staging.dtype() != dtype || staging.numel() != buffer.numel()) {
    TANDEM_THROW(InvalidArgument, "staging buffer ", staging.to_string(), " should be ",
                 dtype_name(dtype), " with ", buffer.numel(), " elements");
  }
  // For mean, divide before narrowing (the buffer is overwritten at the end anyway).
  if (op == ReduceOp::mean) {
    kernels::scale_in_place(DType::f32, buffer.raw_data(), buffer.numel(),
                            1.0f / static_cast<float>(comm.size()));
  }
  convert(buffer.raw_data(), DType::f32, staging.raw_data(), dtype, buffer.numel());
  comm.all_reduce(staging, ReduceOp::sum);
  convert(staging.raw_data(), dtype, buffer.raw_data(), DType::f32, buffer.numel());
}

}  // namespace tandem::comm
