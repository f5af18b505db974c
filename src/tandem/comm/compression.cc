#include "tandem/comm/compression.h"

#include "tandem/base/error.h"
#include "tandem/base/name_table.h"
#include "tandem/comm/detail/reduce_kernels.h"
#include "tandem/tensor/convert.h"

namespace tandem::comm {

namespace {

// "none" also means f32 (no compression).
constexpr NameTable<WireDType, 4> kWireDTypes{"wire dtype",
                                              {{{WireDType::f32, "f32"},
                                                {WireDType::bf16, "bf16"},
                                                {WireDType::f16, "f16"},
                                                {WireDType::f32, "none"}}}};

}  // namespace

std::string_view wire_dtype_name(WireDType wire) {
  return kWireDTypes.name(wire);
}

WireDType parse_wire_dtype(std::string_view name) {
  return kWireDTypes.parse(name);
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
