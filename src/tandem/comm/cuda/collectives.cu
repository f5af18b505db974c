// The reduction of the in-process collectives over GPU buffers
// (comm/inprocess.cc): element-wise over every rank's buffer, in rank order,
// in f32 for the floating dtypes (the CPU's order and precision) and with
// wrap-around for i32 sums, as MPI_SUM does.
#include <vector>

#include "tandem/comm/cuda/collectives.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"
#include "tandem/tensor/tensor.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;

__device__ float combine(Reduction op, float a, float b) {
  return op == Reduction::sum ? a + b : (op == Reduction::max ? fmaxf(a, b) : fminf(a, b));
}

template <typename T>
__global__ void reduce_kernel(const void* const* inputs, int input_count, void* const* outputs,
                              int output_count, int64_t begin, int64_t n, Reduction op,
                              float scale) {
  TANDEM_CUDA_FOR(j, n) {
    const int64_t i = begin + j;
    float acc = load(static_cast<const T*>(inputs[0]), i);
    for (int r = 1; r < input_count; ++r)
      acc = combine(op, acc, load(static_cast<const T*>(inputs[r]), i));
    for (int k = 0; k < output_count; ++k) store(static_cast<T*>(outputs[k]), i, acc * scale);
  }
}

__global__ void reduce_i32_kernel(const void* const* inputs, int input_count, void* const* outputs,
                                  int output_count, int64_t begin, int64_t n, Reduction op) {
  TANDEM_CUDA_FOR(j, n) {
    const int64_t i = begin + j;
    int32_t acc = static_cast<const int32_t*>(inputs[0])[i];
    for (int r = 1; r < input_count; ++r) {
      const int32_t v = static_cast<const int32_t*>(inputs[r])[i];
      acc = op == Reduction::sum
                ? static_cast<int32_t>(static_cast<uint32_t>(acc) + static_cast<uint32_t>(v))
                : (op == Reduction::max ? max(acc, v) : min(acc, v));
    }
    for (int k = 0; k < output_count; ++k) static_cast<int32_t*>(outputs[k])[i] = acc;
  }
}

// Lets `device`'s GPU read and write buffers on the GPU that holds p.
void reach(Device device, const void* p) {
  cudaPointerAttributes attributes{};
  check(cudaPointerGetAttributes(&attributes, p), "cudaPointerGetAttributes");
  if (attributes.type != cudaMemoryTypeDevice) {
    TANDEM_THROW(InvalidArgument, "in-process collective on ", device.to_string(),
                 ": a peer's buffer is not GPU memory (every rank's buffers must be on GPUs)");
  }
  const int here = physical_index(device);
  if (attributes.device == here) return;
  int can = 0;
  check(cudaDeviceCanAccessPeer(&can, here, attributes.device), "cudaDeviceCanAccessPeer");
  if (!can) {
    TANDEM_THROW(NotImplemented, "in-process collective: GPU ", here, " cannot reach GPU ",
                 attributes.device, "'s memory (no peer access); this needs NCCL");
  }
  const cudaError_t status = cudaDeviceEnablePeerAccess(attributes.device, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return;
  }
  check(status, "cudaDeviceEnablePeerAccess");
}

}  // namespace

void reduce_range(Device device, DType dtype, Reduction op, float scale, const void* const* inputs,
                  int input_count, void* const* outputs, int output_count, int64_t begin,
                  int64_t end) {
  if (begin >= end || output_count == 0) return;
  DeviceGuard guard(device);
  std::vector<const void*> pointers;
  for (int r = 0; r < input_count; ++r) pointers.push_back(inputs[r]);
  for (int k = 0; k < output_count; ++k) pointers.push_back(outputs[k]);
  for (const void* p : pointers) reach(device, p);
  // The pointer tables travel to the device (pageable: staged before return).
  Tensor table = Tensor::empty(Shape{static_cast<int64_t>(pointers.size() * sizeof(void*))},
                               DType::u8, device, MemoryCategory::communication);
  check(cudaMemcpyAsync(table.device_data(), pointers.data(), pointers.size() * sizeof(void*),
                        cudaMemcpyHostToDevice, stream(device)),
        "cudaMemcpyAsync");
  const auto* in = static_cast<const void* const*>(table.device_data());
  auto* out = static_cast<void* const*>(static_cast<void**>(table.device_data()) + input_count);
  const int64_t n = end - begin;
  if (dtype == DType::i32) {
    reduce_i32_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream(device)>>>(
        in, input_count, out, output_count, begin, n, op);
  } else {
    dispatch_float(dtype, "in-process reduction", [&](auto* tag) {
      using T = Element<decltype(tag)>;
      reduce_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(device)>>>(
          in, input_count, out, output_count, begin, n, op, scale);
    });
  }
  check_launch("in-process reduction");
}

}  // namespace tandem::cuda
