// Layout copies on the device: strided row copies (slice, unslice, concat)
// as 2-D memcpys on the stream, and permute as a gather over output
// elements, moved in the widest word the contiguous run allows.
#include <cstdint>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;
constexpr int kMaxRank = 8;

// y's dimensions and, for each, the stride (in words) of the x dimension it
// reads; only the dimensions before the contiguous run.
struct Gather {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t x_stride[kMaxRank] = {};
  int64_t run = 1;  // words moved together
};

template <typename W>
__global__ void permute_kernel(const W* x, W* y, Gather g, int64_t words) {
  TANDEM_CUDA_FOR(i, words) {
    int64_t rest = i / g.run, offset = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      offset += (rest % g.dims[d]) * g.x_stride[d];
      rest /= g.dims[d];
    }
    y[i] = x[offset + i % g.run];
  }
}

}  // namespace

void copy_rows(Device device, const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch,
               int64_t bytes, int64_t rows) {
  if (bytes == 0 || rows == 0) return;
  DeviceGuard guard(device);
  check(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                          static_cast<size_t>(bytes), static_cast<size_t>(rows),
                          cudaMemcpyDeviceToDevice, stream(device)),
        "copy_rows (cudaMemcpy2DAsync)");
}

void permute_into(const Tensor& x, std::span<const int> order, int kept, Tensor& y) {
  if (kept > kMaxRank) {
    TANDEM_THROW(ShapeError, "permute on a GPU moves at most ", kMaxRank, " dimensions, got ", kept,
                 " for ", x.shape().to_string());
  }
  const int rank = x.rank();
  int64_t run_bytes = static_cast<int64_t>(dtype_size(x.dtype()));
  for (int i = kept; i < rank; ++i) run_bytes *= x.dim(i);
  // The widest word that divides the run (and so every offset).
  int64_t word = 8;
  while (run_bytes % word != 0) word /= 2;
  Gather g;
  g.rank = kept;
  g.run = run_bytes / word;
  std::vector<int64_t> stride(static_cast<size_t>(rank));
  int64_t s = g.run;
  for (int i = rank - 1; i >= 0; --i) {
    stride[static_cast<size_t>(i)] = i >= kept ? 0 : s;
    if (i < kept) s *= x.dim(i);
  }
  for (int i = 0; i < kept; ++i) {
    g.dims[i] = y.dim(i);
    g.x_stride[i] = stride[static_cast<size_t>(order[static_cast<size_t>(i)])];
  }
  const int64_t words = static_cast<int64_t>(x.nbytes()) / word;
  DeviceGuard guard(x.device());
  const unsigned int blocks = blocks_for(words, kThreads);
  cudaStream_t st = stream(x.device());
  const void* in = x.device_data();
  void* out = y.device_data();
  switch (word) {
    case 8:
      permute_kernel<<<blocks, kThreads, 0, st>>>(static_cast<const uint64_t*>(in),
                                                  static_cast<uint64_t*>(out), g, words);
      break;
    case 4:
      permute_kernel<<<blocks, kThreads, 0, st>>>(static_cast<const uint32_t*>(in),
                                                  static_cast<uint32_t*>(out), g, words);
      break;
    case 2:
      permute_kernel<<<blocks, kThreads, 0, st>>>(static_cast<const uint16_t*>(in),
                                                  static_cast<uint16_t*>(out), g, words);
      break;
    default:
      permute_kernel<<<blocks, kThreads, 0, st>>>(static_cast<const uint8_t*>(in),
                                                  static_cast<uint8_t*>(out), g, words);
  }
  check_launch("permute");
}

}  // namespace tandem::cuda
