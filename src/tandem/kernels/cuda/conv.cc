// 2-D convolution on cuDNN, channels-last as on the CPU. cuDNN's NHWC
// filters are (O, KH, KW, C), tandem's are (KH, KW, C, O) as in TensorFlow,
// so the weights are permuted on the way in and their gradient on the way
// out (small next to the activations). bf16 runs on Tensor Cores with f32
// accumulation; f32 on TF32 Tensor Cores unless kernels::set_matmul_allow_tf32
// turned that off, the same switch as for matmul. Algorithms come from
// cuDNN's heuristics, deterministic ones first, and are kept per problem.

#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tandem/base/error.h"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/kernels/cuda/libraries.h"
#include "tandem/kernels/flops.h"
#include "tandem/tensor/cuda/runtime.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // see libraries.h

namespace tandem::cuda {
namespace {

using kernels::Conv2dGeometry;

// The most workspace an algorithm may ask for.
constexpr size_t kMaxWorkspace = size_t{256} << 20;

void check_dnn(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  TANDEM_THROW(Error, "cuDNN error in ", what, ": ", cudnn().error_string(status));
}

cudnnHandle_t handle(Device device) {
  thread_local std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(device.index);
  if (it != handles.end()) return it->second;
  DeviceGuard guard(device);
  cudnnHandle_t created = nullptr;
  check_dnn(cudnn().create(&created), "cudnnCreate");
  check_dnn(cudnn().set_stream(created, stream(device)), "cudnnSetStream");
  handles.emplace(device.index, created);
  return created;
}

cudnnDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f16:
      return CUDNN_DATA_HALF;
    default:
      TANDEM_THROW(InvalidArgument, "conv2d on CUDA: no cuDNN type for ", dtype_name(dtype));
  }
}

int narrow(int64_t v, const char* what) {
  if (v > INT_MAX)
    TANDEM_THROW(ShapeError, "conv2d on CUDA: ", what, " ", v, " exceeds cuDNN's int");
  return static_cast<int>(v);
}

// One direction's descriptor (its own, since the math type is per
// algorithm), algorithm and workspace.
template <typename Algo>
struct Step {
  cudnnConvolutionDescriptor_t conv = nullptr;
  Algo algo{};
  size_t workspace = 0;
};

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  Step<cudnnConvolutionFwdAlgo_t> forward;
  Step<cudnnConvolutionBwdDataAlgo_t> data;
  Step<cudnnConvolutionBwdFilterAlgo_t> filter;
};

// The first result that succeeded within the workspace limit, deterministic
// ones preferred (the same inputs then give the same gradients).
template <typename Perf>
const Perf& choose(const Perf* perf, int count, const char* direction, const Shape& x,
                   const Shape& w, DType dtype) {
  const Perf* any = nullptr;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kMaxWorkspace) continue;
    if (perf[i].determinism == CUDNN_DETERMINISTIC) return perf[i];
    if (any == nullptr) any = &perf[i];
  }
  if (any == nullptr) {
    TANDEM_THROW(NotImplemented, "cuDNN has no ", direction, " algorithm for a ", dtype_name(dtype),
                 " convolution of ", x.to_string(), " by ", w.to_string(), " within ",
                 kMaxWorkspace >> 20, " MiB of workspace");
  }
  return *any;
}

cudnnConvolutionDescriptor_t convolution(const Conv2dGeometry& g, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t c = nullptr;
  check_dnn(cudnn().convolution_create(&c), "cudnnCreateConvolutionDescriptor");
  check_dnn(
      cudnn().convolution_set_2d(c, narrow(g.pad_h, "padding"), narrow(g.pad_w, "padding"),
                                 narrow(g.stride_h, "stride"), narrow(g.stride_w, "stride"),
                                 narrow(g.dilation_h, "dilation"), narrow(g.dilation_w, "dilation"),
                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      "cudnnSetConvolution2dDescriptor");
  check_dnn(cudnn().convolution_set_math(c, math), "cudnnSetConvolutionMathType");
  return c;
}

// The math type a step runs in: the algorithm's, except that f32 without
// TF32 stays on FMA kernels.
cudnnMathType_t step_math(cudnnMathType_t chosen, bool fma_only) {
  return fma_only ? CUDNN_FMA_MATH : chosen;
}

std::shared_ptr<Plan> plan_for(const Shape& x, const Shape& w, const Conv2dGeometry& g, DType dtype,
                               Device device) {
  const bool fma_only = dtype == DType::f32 && !kernels::matmul_allow_tf32();
  const std::string key = tandem::detail::concat(
      device.index, ':', dtype_name(dtype), x.to_string(), w.to_string(), ':', g.stride_h, ',',
      g.stride_w, ',', g.pad_h, ',', g.pad_w, ',', g.dilation_h, ',', g.dilation_w, ':', fma_only);
  static std::mutex mutex;
  static auto* plans = new std::map<std::string, std::shared_ptr<Plan>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*plans)[key];
  if (slot) return slot;

  const Shape y = kernels::conv2d_output_shape(x, w, g);
  for (const Shape* s : {&x, &y}) {
    if (s->numel() > INT_MAX) {
      TANDEM_THROW(ShapeError, "conv2d on CUDA: ", s->to_string(), " has more than 2^31 elements");
    }
  }
  const cudnnDataType_t type = data_type(dtype);
  auto plan = std::make_shared<Plan>();
  check_dnn(cudnn().tensor_create(&plan->x), "cudnnCreateTensorDescriptor");
  check_dnn(cudnn().tensor_set_4d(plan->x, CUDNN_TENSOR_NHWC, type, narrow(x[0], "batch"),
                                  narrow(x[3], "channels"), narrow(x[1], "height"),
                                  narrow(x[2], "width")),
            "cudnnSetTensor4dDescriptor");
  check_dnn(cudnn().tensor_create(&plan->y), "cudnnCreateTensorDescriptor");
  check_dnn(cudnn().tensor_set_4d(plan->y, CUDNN_TENSOR_NHWC, type, narrow(y[0], "batch"),
                                  narrow(y[3], "channels"), narrow(y[1], "height"),
                                  narrow(y[2], "width")),
            "cudnnSetTensor4dDescriptor");
  check_dnn(cudnn().filter_create(&plan->w), "cudnnCreateFilterDescriptor");
  check_dnn(cudnn().filter_set_4d(plan->w, type, CUDNN_TENSOR_NHWC, narrow(w[3], "outputs"),
                                  narrow(w[2], "channels"), narrow(w[0], "kernel height"),
                                  narrow(w[1], "kernel width")),
            "cudnnSetFilter4dDescriptor");
  const cudnnMathType_t math = fma_only              ? CUDNN_FMA_MATH
                               : dtype == DType::f32 ? CUDNN_DEFAULT_MATH
                                                     : CUDNN_TENSOR_OP_MATH;
  cudnnHandle_t h = handle(device);
  constexpr int kCandidates = 16;
  int found = 0;
  {
    cudnnConvolutionDescriptor_t probe = convolution(g, math);
    cudnnConvolutionFwdAlgoPerf_t perf[kCandidates];
    check_dnn(
        cudnn().forward_algorithms(h, plan->x, plan->w, probe, plan->y, kCandidates, &found, perf),
        "cudnnGetConvolutionForwardAlgorithm_v7");
    const auto& best = choose(perf, found, "forward", x, w, dtype);
    plan->forward.conv = convolution(g, step_math(best.mathType, fma_only));
    plan->forward.algo = best.algo;
    check_dnn(cudnn().forward_workspace(h, plan->x, plan->w, plan->forward.conv, plan->y, best.algo,
                                        &plan->forward.workspace),
              "cudnnGetConvolutionForwardWorkspaceSize");
    cudnnConvolutionBwdDataAlgoPerf_t data[kCandidates];
    check_dnn(cudnn().backward_data_algorithms(h, plan->w, plan->y, probe, plan->x, kCandidates,
                                               &found, data),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    const auto& best_data = choose(data, found, "backward-data", x, w, dtype);
    plan->data.conv = convolution(g, step_math(best_data.mathType, fma_only));
    plan->data.algo = best_data.algo;
    check_dnn(cudnn().backward_data_workspace(h, plan->w, plan->y, plan->data.conv, plan->x,
                                              best_data.algo, &plan->data.workspace),
              "cudnnGetConvolutionBackwardDataWorkspaceSize");
    cudnnConvolutionBwdFilterAlgoPerf_t filter[kCandidates];
    check_dnn(cudnn().backward_filter_algorithms(h, plan->x, plan->y, probe, plan->w, kCandidates,
                                                 &found, filter),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    const auto& best_filter = choose(filter, found, "backward-filter", x, w, dtype);
    plan->filter.conv = convolution(g, step_math(best_filter.mathType, fma_only));
    plan->filter.algo = best_filter.algo;
    check_dnn(cudnn().backward_filter_workspace(h, plan->x, plan->y, plan->filter.conv, plan->w,
                                                best_filter.algo, &plan->filter.workspace),
              "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    cudnn().convolution_destroy(probe);
  }
  slot = plan;
  return plan;
}

Tensor workspace(size_t bytes, Device device) {
  return Tensor::empty(Shape{static_cast<int64_t>(bytes)}, DType::u8, device,
                       MemoryCategory::workspace);
}

// (KH, KW, C, O) <-> cuDNN's (O, KH, KW, C).
constexpr int kToCudnn[] = {3, 0, 1, 2};
constexpr int kFromCudnn[] = {1, 2, 3, 0};

Tensor permuted(const Tensor& t, std::span<const int> order) {
  Tensor out =
      Tensor::empty(Shape{t.dim(order[0]), t.dim(order[1]), t.dim(order[2]), t.dim(order[3])},
                    t.dtype(), t.device(), MemoryCategory::workspace);
  permute_into(t, order, 4, out);
  return out;
}

int64_t conv_flops(const Shape& x, const Shape& w, const Shape& y) {
  return 2 * y[0] * y[1] * y[2] * y[3] * w[0] * w[1] * x[3];
}

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dGeometry& g,
                      kernels::Activation activation, DType out_dtype) {
  const Shape y_shape = kernels::conv2d_output_shape(x.shape(), w.shape(), g);
  Tensor y = Tensor::empty(y_shape, x.dtype(), x.device());
  if (y.numel() == 0) return y.to(out_dtype);
  DeviceGuard guard(x.device());
  const std::shared_ptr<Plan> plan = plan_for(x.shape(), w.shape(), g, x.dtype(), x.device());
  const Tensor filter = permuted(w, kToCudnn);
  const Tensor space = workspace(plan->forward.workspace, x.device());
  const float one = 1.0f, zero = 0.0f;
  check_dnn(cudnn().forward(handle(x.device()), &one, plan->x, x.device_data(), plan->w,
                            filter.device_data(), plan->forward.conv, plan->forward.algo,
                            space.device_data(), plan->forward.workspace, &zero, plan->y,
                            y.device_data()),
            "cudnnConvolutionForward");
  // The epilogue in the output type, as the CPU's oneDNN post-ops.
  if (out_dtype != y.dtype()) y = y.to(out_dtype);
  if (bias.defined() || activation != kernels::Activation::none) {
    bias_activation_inplace(y, bias, activation);
  }
  kernels::count_flops(conv_flops(x.shape(), w.shape(), y_shape));
  return y;
}

Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dGeometry& g, DType out_dtype) {
  const Shape y_shape = kernels::conv2d_output_shape(x_shape, w.shape(), g);
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  if (dx.numel() == 0) return dx.to(out_dtype);
  if (dy.numel() == 0) {
    dx.zero();
    return dx.to(out_dtype);
  }
  DeviceGuard guard(dy.device());
  const std::shared_ptr<Plan> plan = plan_for(x_shape, w.shape(), g, dy.dtype(), dy.device());
  const Tensor filter = permuted(w, kToCudnn);
  const Tensor space = workspace(plan->data.workspace, dy.device());
  const float one = 1.0f, zero = 0.0f;
  check_dnn(
      cudnn().backward_data(handle(dy.device()), &one, plan->w, filter.device_data(), plan->y,
                            dy.device_data(), plan->data.conv, plan->data.algo, space.device_data(),
                            plan->data.workspace, &zero, plan->x, dx.device_data()),
      "cudnnConvolutionBackwardData");
  kernels::count_flops(conv_flops(x_shape, w.shape(), y_shape));
  return out_dtype == dx.dtype() ? dx : dx.to(out_dtype);
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2dGeometry& g, Tensor& dw,
                             Tensor* db) {
  const Shape y_shape = kernels::conv2d_output_shape(x.shape(), dw.shape(), g);
  if (dy.numel() == 0 || x.numel() == 0) {
    dw.zero();
    if (db != nullptr) db->zero();
    return;
  }
  DeviceGuard guard(x.device());
  const std::shared_ptr<Plan> plan = plan_for(x.shape(), dw.shape(), g, x.dtype(), x.device());
  // cuDNN writes the filter gradient in the operands' type and its layout.
  Tensor filter = Tensor::empty(Shape{dw.dim(3), dw.dim(0), dw.dim(1), dw.dim(2)}, x.dtype(),
                                x.device(), MemoryCategory::workspace);
  const Tensor space = workspace(plan->filter.workspace, x.device());
  const float one = 1.0f, zero = 0.0f;
  check_dnn(cudnn().backward_filter(handle(x.device()), &one, plan->x, x.device_data(), plan->y,
                                    dy.device_data(), plan->filter.conv, plan->filter.algo,
                                    space.device_data(), plan->filter.workspace, &zero, plan->w,
                                    filter.device_data()),
            "cudnnConvolutionBackwardFilter");
  if (filter.dtype() == DType::f32) {
    permute_into(filter, kFromCudnn, 4, dw);
  } else {
    dw.copy_from(permuted(filter, kFromCudnn).to(DType::f32));
  }
  if (db != nullptr) db->copy_from(sum_to_shape(dy, Shape{dy.dim(3)}));
  kernels::count_flops(conv_flops(x.shape(), dw.shape(), y_shape));
}

}  // namespace tandem::cuda
