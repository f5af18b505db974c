// Matrix products on cuBLASLt: bf16/f16 on Tensor Cores with f32
// accumulation, f32 on TF32 Tensor Cores unless kernels::set_matmul_allow_tf32
// turned that off. cuBLASLt is column-major; a row-major (R, C) matrix is the
// column-major (C, R) one, so out = op(a) op(b) is computed as
// out^T = op(b)^T op(a)^T with b in cuBLAS's A slot and a in its B slot.

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tandem/base/error.h"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/kernels/cuda/libraries.h"
#include "tandem/kernels/flops.h"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

// Hopper's recommended cuBLASLt workspace.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_blas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  TANDEM_THROW(Error, "cuBLASLt error in ", what, ": ", cublaslt().status_name(status), " (",
               cublaslt().status_string(status), ")");
}

cublasLtHandle_t handle(Device device) {
  thread_local std::map<int, cublasLtHandle_t> handles;
  auto it = handles.find(device.index);
  if (it != handles.end()) return it->second;
  DeviceGuard guard(device);
  cublasLtHandle_t created = nullptr;
  check_blas(cublaslt().create(&created), "cublasLtCreate");
  handles.emplace(device.index, created);
  return created;
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      TANDEM_THROW(InvalidArgument, "matmul on CUDA: no matrix type for ", dtype_name(dtype));
  }
}

// The largest power of two up to 256 that divides the address: cuBLASLt
// picks kernels by the operands' alignment, and views (slices) may be less
// aligned than a fresh block.
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// Descriptors and the chosen algorithm of one problem, kept for the process.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                              int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_blas(cublaslt().layout_create(&l, type, static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), ld),
             "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check_blas(cublaslt().layout_set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
               "batch count");
    check_blas(cublaslt().layout_set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                     sizeof(stride)),
               "batch stride");
  }
  return l;
}

std::shared_ptr<Plan> plan_for(const MatmulProblem& p, const Tensor& a, const Tensor& b,
                               const Tensor& out, const kernels::MatmulOptions& o) {
  const bool tf32 = a.dtype() == DType::f32 && kernels::matmul_allow_tf32();
  const uint32_t align_a = alignment(b.device_data());  // cuBLAS's A is our b
  const uint32_t align_b = alignment(a.device_data());
  const uint32_t align_c = alignment(out.device_data());
  const std::string key = tandem::detail::concat(
      a.device().index, ':', dtype_name(a.dtype()), dtype_name(out.dtype()), ':', p.batch, ',',
      p.b_batch, ',', p.M, ',', p.K, ',', p.N, ':', o.transpose_a, o.transpose_b, tf32, ':',
      align_a, ',', align_b, ',', align_c);
  static std::mutex mutex;
  static auto* plans = new std::map<std::string, std::shared_ptr<Plan>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*plans)[key];
  if (slot) return slot;

  auto plan = std::make_shared<Plan>();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check_blas(cublaslt().desc_create(&plan->op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t op_a = o.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = o.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_blas(cublaslt().desc_set(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
             "transa");
  check_blas(cublaslt().desc_set(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
             "transb");
  const cudaDataType_t in = data_type(a.dtype());
  // Stored column-major shapes: b is (N, K) ld N, or (K, N) ld K when
  // transposed; a is (K, M) ld K, or (M, K) ld M when transposed.
  plan->a = o.transpose_b ? layout(in, p.K, p.N, p.K, p.batch, p.b_batch == 1 ? 0 : p.K * p.N)
                          : layout(in, p.N, p.K, p.N, p.batch, p.b_batch == 1 ? 0 : p.K * p.N);
  plan->b = o.transpose_a ? layout(in, p.M, p.K, p.M, p.batch, p.M * p.K)
                          : layout(in, p.K, p.M, p.K, p.batch, p.M * p.K);
  plan->c = layout(data_type(out.dtype()), p.N, p.M, p.N, p.batch, p.M * p.N);

  cublasLtMatmulPreference_t pref = nullptr;
  check_blas(cublaslt().preference_create(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = kWorkspaceBytes;
  cublaslt().preference_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                            sizeof(workspace));
  cublaslt().preference_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                            sizeof(align_a));
  cublaslt().preference_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                            sizeof(align_b));
  cublaslt().preference_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                            sizeof(align_c));
  cublaslt().preference_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                            sizeof(align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublaslt().heuristic(handle(a.device()), plan->op, plan->a, plan->b,
                                                     plan->c, plan->c, pref, 1, &result, &found);
  cublaslt().preference_destroy(pref);
  check_blas(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) {
    TANDEM_THROW(NotImplemented, "cuBLASLt has no algorithm for a ", dtype_name(a.dtype()),
                 " product of (", p.M, ", ", p.K, ") x (", p.K, ", ", p.N, ") x ", p.batch);
  }
  plan->algo = result.algo;
  slot = plan;
  return plan;
}

}  // namespace

void run_matmul(const MatmulProblem& p, const Tensor& a, const Tensor& b, const Tensor& bias,
                Tensor& out, const kernels::MatmulOptions& options) {
  if (p.M == 0 || p.N == 0 || p.batch == 0) return;
  DeviceGuard guard(a.device());
  if (a.dtype() == DType::f32 && out.dtype() != DType::f32) {
    // cuBLASLt has no f32 x f32 -> bf16 product (CUBLAS_STATUS_NOT_SUPPORTED
    // on the H200): the f32 result with its bias and activation, rounded
    // once, as on the CPU.
    Tensor wide = Tensor::empty(out.shape(), DType::f32, out.device(), MemoryCategory::workspace);
    run_matmul(p, a, b, bias, wide, options);
    out.copy_from(wide);
    return;
  }
  if (p.K == 0) {
    out.zero();
  } else {
    const std::shared_ptr<Plan> plan = plan_for(p, a, b, out, options);
    Tensor workspace = Tensor::empty(Shape{static_cast<int64_t>(kWorkspaceBytes)}, DType::u8,
                                     a.device(), MemoryCategory::workspace);
    const float one = 1.0f, zero = 0.0f;
    check_blas(cublaslt().matmul(handle(a.device()), plan->op, &one, b.device_data(), plan->a,
                                 a.device_data(), plan->b, &zero, out.device_data(), plan->c,
                                 out.device_data(), plan->c, &plan->algo, workspace.device_data(),
                                 kWorkspaceBytes, stream(a.device())),
               "cublasLtMatmul");
  }
  if (bias.defined() || options.activation != kernels::Activation::none) {
    bias_activation_inplace(out, bias, options.activation);
  }
  kernels::count_flops(2 * p.batch * p.M * p.N * p.K);
}

}  // namespace tandem::cuda
