#include "tandem/cuda/libraries.h"

#include <dlfcn.h>

#include <mutex>

#include "tandem/base/error.h"

namespace tandem::cuda {
namespace {

// The handle of the first of `names` that loads, or nullptr.
void* open_library(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  return nullptr;
}

template <typename F>
void bind(void* handle, const char* library, const char* symbol, F& slot) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    TANDEM_THROW(Error, library, " has no ", symbol, ": a version older than tandem was built for");
  }
  slot = reinterpret_cast<F>(address);
}

// major * 10000 + minor * 100 + patch, as cuBLASLt, cuDNN 9 and NCCL 2.9+ encode it.
std::string dotted(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

const CublasLt& cublaslt() {
  static CublasLt lt{};
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    void* h = open_library({"libcublasLt.so.13", "libcublasLt.so"});
    if (h == nullptr) {
      failure = std::string("cannot load cuBLASLt (libcublasLt.so.13): ") + dlerror() +
                " (put the CUDA libraries on LD_LIBRARY_PATH)";
      return;
    }
    try {
      const char* name = "libcublasLt";
      bind(h, name, "cublasLtCreate", lt.create);
      bind(h, name, "cublasLtGetVersion", lt.get_version);
      bind(h, name, "cublasLtGetStatusName", lt.status_name);
      bind(h, name, "cublasLtGetStatusString", lt.status_string);
      bind(h, name, "cublasLtMatrixLayoutCreate", lt.layout_create);
      bind(h, name, "cublasLtMatrixLayoutSetAttribute", lt.layout_set);
      bind(h, name, "cublasLtMatmulDescCreate", lt.desc_create);
      bind(h, name, "cublasLtMatmulDescSetAttribute", lt.desc_set);
      bind(h, name, "cublasLtMatmulPreferenceCreate", lt.preference_create);
      bind(h, name, "cublasLtMatmulPreferenceSetAttribute", lt.preference_set);
      bind(h, name, "cublasLtMatmulPreferenceDestroy", lt.preference_destroy);
      bind(h, name, "cublasLtMatmulAlgoGetHeuristic", lt.heuristic);
      bind(h, name, "cublasLtMatmul", lt.matmul);
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) TANDEM_THROW(Error, failure);
  return lt;
}

const Nccl& nccl() {
  static Nccl n{};
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    void* h = open_library({"libnccl.so.2", "libnccl.so"});
    if (h == nullptr) {
      failure = std::string("cannot load NCCL (libnccl.so.2): ") + dlerror() +
                " (put the CUDA libraries on LD_LIBRARY_PATH)";
      return;
    }
    try {
      const char* name = "libnccl";
      bind(h, name, "ncclGetUniqueId", n.get_unique_id);
      bind(h, name, "ncclCommInitRank", n.comm_init_rank);
      bind(h, name, "ncclCommInitAll", n.comm_init_all);
      bind(h, name, "ncclCommDestroy", n.comm_destroy);
      bind(h, name, "ncclCommAbort", n.comm_abort);
      bind(h, name, "ncclCommGetAsyncError", n.comm_get_async_error);
      bind(h, name, "ncclGetErrorString", n.error_string);
      bind(h, name, "ncclAllReduce", n.all_reduce);
      bind(h, name, "ncclReduceScatter", n.reduce_scatter);
      bind(h, name, "ncclAllGather", n.all_gather);
      bind(h, name, "ncclBroadcast", n.broadcast);
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) TANDEM_THROW(Error, failure);
  return n;
}

const Cudnn& cudnn() {
  static Cudnn d{};
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    void* h = open_library({"libcudnn.so.9", "libcudnn.so"});
    if (h == nullptr) {
      failure = std::string("cannot load cuDNN (libcudnn.so.9): ") + dlerror() +
                " (put the CUDA libraries on LD_LIBRARY_PATH)";
      return;
    }
    try {
      const char* name = "libcudnn";
      bind(h, name, "cudnnCreate", d.create);
      bind(h, name, "cudnnSetStream", d.set_stream);
      bind(h, name, "cudnnGetErrorString", d.error_string);
      bind(h, name, "cudnnCreateTensorDescriptor", d.tensor_create);
      bind(h, name, "cudnnSetTensor4dDescriptor", d.tensor_set_4d);
      bind(h, name, "cudnnDestroyTensorDescriptor", d.tensor_destroy);
      bind(h, name, "cudnnCreateFilterDescriptor", d.filter_create);
      bind(h, name, "cudnnSetFilter4dDescriptor", d.filter_set_4d);
      bind(h, name, "cudnnDestroyFilterDescriptor", d.filter_destroy);
      bind(h, name, "cudnnCreateConvolutionDescriptor", d.convolution_create);
      bind(h, name, "cudnnSetConvolution2dDescriptor", d.convolution_set_2d);
      bind(h, name, "cudnnSetConvolutionMathType", d.convolution_set_math);
      bind(h, name, "cudnnDestroyConvolutionDescriptor", d.convolution_destroy);
      bind(h, name, "cudnnGetConvolutionForwardAlgorithm_v7", d.forward_algorithms);
      bind(h, name, "cudnnGetConvolutionForwardWorkspaceSize", d.forward_workspace);
      bind(h, name, "cudnnConvolutionForward", d.forward);
      bind(h, name, "cudnnGetConvolutionBackwardDataAlgorithm_v7", d.backward_data_algorithms);
      bind(h, name, "cudnnGetConvolutionBackwardDataWorkspaceSize", d.backward_data_workspace);
      bind(h, name, "cudnnConvolutionBackwardData", d.backward_data);
      bind(h, name, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", d.backward_filter_algorithms);
      bind(h, name, "cudnnGetConvolutionBackwardFilterWorkspaceSize", d.backward_filter_workspace);
      bind(h, name, "cudnnConvolutionBackwardFilter", d.backward_filter);
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) TANDEM_THROW(Error, failure);
  return d;
}

std::string cublaslt_version() {
  try {
    return dotted(cublaslt().get_version());
  } catch (const Error&) {
    return "not found";
  }
}

std::string cudnn_version() {
  void* h = open_library({"libcudnn.so.9", "libcudnn.so"});
  if (h == nullptr) return "not found";
  auto* get = reinterpret_cast<size_t (*)()>(dlsym(h, "cudnnGetVersion"));
  return get != nullptr ? dotted(get()) : "not found";
}

std::string nccl_version() {
  void* h = open_library({"libnccl.so.2", "libnccl.so"});
  if (h == nullptr) return "not found";
  auto* get = reinterpret_cast<int (*)(int*)>(dlsym(h, "ncclGetVersion"));
  int v = 0;
  return get != nullptr && get(&v) == 0 ? dotted(static_cast<size_t>(v)) : "not found";
}

}  // namespace tandem::cuda
