#pragma once
// Wire compression for gradient all-reduce, as Horovod's and DDP's bf16/fp16
// compression hooks: an f32 buffer travels as bf16 or f16 (half the bytes)
// and is reduced with float32 accumulation where the backend reduces itself
// (in-process); the result is widened back to f32. For mean, values are
// divided by the rank count before narrowing, so f16 sums stay in range.

#include <string_view>

#include "tandem/comm/communicator.h"

namespace tandem::comm {

enum class WireDType : uint8_t { f32, bf16, f16 };

std::string_view wire_dtype_name(WireDType wire);
// "f32" (no compression), "bf16", "f16"; throws InvalidArgument otherwise.
WireDType parse_wire_dtype(std::string_view name);

// All-reduces the f32 `buffer` in place, sending `wire` on the wire. `staging`
// (optional) is a reusable buffer of wire dtype and buffer's element count; one
// is allocated (communication category) when it is undefined. op: sum or mean.
void all_reduce_compressed(Communicator& comm, const Tensor& buffer, ReduceOp op, WireDType wire,
                           Tensor staging = {});

}  // namespace tandem::comm
