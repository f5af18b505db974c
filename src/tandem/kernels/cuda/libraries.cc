#include "tandem/kernels/cuda/libraries.h"

#include <mutex>

#include "tandem/base/error.h"
#include "tandem/base/shared_library.h"

namespace tandem::cuda {

const CublasLt& cublaslt() {
  static CublasLt lt{};
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    void* h = open_shared_library({"libcublasLt.so.13", "libcublasLt.so"});
    if (h == nullptr) {
      failure = std::string("cannot load cuBLASLt (libcublasLt.so.13): ") + shared_library_error() +
                " (put the CUDA libraries on LD_LIBRARY_PATH)";
      return;
    }
    try {
      const char* name = "libcublasLt";
      bind_symbol(h, name, "cublasLtCreate", lt.create);
      bind_symbol(h, name, "cublasLtGetVersion", lt.get_version);
      bind_symbol(h, name, "cublasLtGetStatusName", lt.status_name);
      bind_symbol(h, name, "cublasLtGetStatusString", lt.status_string);
      bind_symbol(h, name, "cublasLtMatrixLayoutCreate", lt.layout_create);
      bind_symbol(h, name, "cublasLtMatrixLayoutSetAttribute", lt.layout_set);
      bind_symbol(h, name, "cublasLtMatmulDescCreate", lt.desc_create);
      bind_symbol(h, name, "cublasLtMatmulDescSetAttribute", lt.desc_set);
      bind_symbol(h, name, "cublasLtMatmulPreferenceCreate", lt.preference_create);
      bind_symbol(h, name, "cublasLtMatmulPreferenceSetAttribute", lt.preference_set);
      bind_symbol(h, name, "cublasLtMatmulPreferenceDestroy", lt.preference_destroy);
      bind_symbol(h, name, "cublasLtMatmulAlgoGetHeuristic", lt.heuristic);
      bind_symbol(h, name, "cublasLtMatmul", lt.matmul);
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) TANDEM_THROW(Error, failure);
  return lt;
}

const Cudnn& cudnn() {
  static Cudnn d{};
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    void* h = open_shared_library({"libcudnn.so.9", "libcudnn.so"});
    if (h == nullptr) {
      failure = std::string("cannot load cuDNN (libcudnn.so.9): ") + shared_library_error() +
                " (put the CUDA libraries on LD_LIBRARY_PATH)";
      return;
    }
    try {
      const char* name = "libcudnn";
      bind_symbol(h, name, "cudnnCreate", d.create);
      bind_symbol(h, name, "cudnnSetStream", d.set_stream);
      bind_symbol(h, name, "cudnnGetErrorString", d.error_string);
      bind_symbol(h, name, "cudnnCreateTensorDescriptor", d.tensor_create);
      bind_symbol(h, name, "cudnnSetTensor4dDescriptor", d.tensor_set_4d);
      bind_symbol(h, name, "cudnnDestroyTensorDescriptor", d.tensor_destroy);
      bind_symbol(h, name, "cudnnCreateFilterDescriptor", d.filter_create);
      bind_symbol(h, name, "cudnnSetFilter4dDescriptor", d.filter_set_4d);
      bind_symbol(h, name, "cudnnDestroyFilterDescriptor", d.filter_destroy);
      bind_symbol(h, name, "cudnnCreateConvolutionDescriptor", d.convolution_create);
      bind_symbol(h, name, "cudnnSetConvolution2dDescriptor", d.convolution_set_2d);
      bind_symbol(h, name, "cudnnSetConvolutionMathType", d.convolution_set_math);
      bind_symbol(h, name, "cudnnDestroyConvolutionDescriptor", d.convolution_destroy);
      bind_symbol(h, name, "cudnnGetConvolutionForwardAlgorithm_v7", d.forward_algorithms);
      bind_symbol(h, name, "cudnnGetConvolutionForwardWorkspaceSize", d.forward_workspace);
      bind_symbol(h, name, "cudnnConvolutionForward", d.forward);
      bind_symbol(h, name, "cudnnGetConvolutionBackwardDataAlgorithm_v7", d.backward_data_algorithms);
      bind_symbol(h, name, "cudnnGetConvolutionBackwardDataWorkspaceSize", d.backward_data_workspace);
      bind_symbol(h, name, "cudnnConvolutionBackwardData", d.backward_data);
      bind_symbol(h, name, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", d.backward_filter_algorithms);
      bind_symbol(h, name, "cudnnGetConvolutionBackwardFilterWorkspaceSize", d.backward_filter_workspace);
      bind_symbol(h, name, "cudnnConvolutionBackwardFilter", d.backward_filter);
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) TANDEM_THROW(Error, failure);
  return d;
}

std::string cublaslt_version() {
  try {
    return dotted_version(cublaslt().get_version());
  } catch (const Error&) {
    return "not found";
  }
}

std::string cudnn_version() {
  void* h = open_shared_library({"libcudnn.so.9", "libcudnn.so"});
  if (h == nullptr) return "not found";
  try {
    size_t (*get)() = nullptr;
    bind_symbol(h, "libcudnn", "cudnnGetVersion", get);
    return dotted_version(get());
  } catch (const Error&) {
    return "not found";
  }
}

}  // namespace tandem::cuda
