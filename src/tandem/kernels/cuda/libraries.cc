#include "tandem/kernels/cuda/libraries.h"

#include "tandem/base/error.h"
#include "tandem/base/shared_library.h"

namespace tandem::cuda {

const CublasLt& cublaslt() {
  static LazyLibrary<CublasLt> library(
      "cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so"},
      [](void* handle, const char* file, CublasLt& t) {
        bind_symbol(handle, file, "cublasLtCreate", t.create);
        bind_symbol(handle, file, "cublasLtGetVersion", t.get_version);
        bind_symbol(handle, file, "cublasLtGetStatusName", t.status_name);
        bind_symbol(handle, file, "cublasLtGetStatusString", t.status_string);
        bind_symbol(handle, file, "cublasLtMatrixLayoutCreate", t.layout_create);
        bind_symbol(handle, file, "cublasLtMatrixLayoutSetAttribute", t.layout_set);
        bind_symbol(handle, file, "cublasLtMatmulDescCreate", t.desc_create);
        bind_symbol(handle, file, "cublasLtMatmulDescSetAttribute", t.desc_set);
        bind_symbol(handle, file, "cublasLtMatmulPreferenceCreate", t.preference_create);
        bind_symbol(handle, file, "cublasLtMatmulPreferenceSetAttribute", t.preference_set);
        bind_symbol(handle, file, "cublasLtMatmulPreferenceDestroy", t.preference_destroy);
        bind_symbol(handle, file, "cublasLtMatmulAlgoGetHeuristic", t.heuristic);
        bind_symbol(handle, file, "cublasLtMatmul", t.matmul);
      });
  return library.get();
}

const Cudnn& cudnn() {
  static LazyLibrary<Cudnn> library(
      "cuDNN", {"libcudnn.so.9", "libcudnn.so"}, [](void* handle, const char* file, Cudnn& t) {
        bind_symbol(handle, file, "cudnnCreate", t.create);
        bind_symbol(handle, file, "cudnnSetStream", t.set_stream);
        bind_symbol(handle, file, "cudnnGetErrorString", t.error_string);
        bind_symbol(handle, file, "cudnnCreateTensorDescriptor", t.tensor_create);
        bind_symbol(handle, file, "cudnnSetTensor4dDescriptor", t.tensor_set_4d);
        bind_symbol(handle, file, "cudnnDestroyTensorDescriptor", t.tensor_destroy);
        bind_symbol(handle, file, "cudnnCreateFilterDescriptor", t.filter_create);
        bind_symbol(handle, file, "cudnnSetFilter4dDescriptor", t.filter_set_4d);
        bind_symbol(handle, file, "cudnnDestroyFilterDescriptor", t.filter_destroy);
        bind_symbol(handle, file, "cudnnCreateConvolutionDescriptor", t.convolution_create);
        bind_symbol(handle, file, "cudnnSetConvolution2dDescriptor", t.convolution_set_2d);
        bind_symbol(handle, file, "cudnnSetConvolutionMathType", t.convolution_set_math);
        bind_symbol(handle, file, "cudnnDestroyConvolutionDescriptor", t.convolution_destroy);
        bind_symbol(handle, file, "cudnnGetConvolutionForwardAlgorithm_v7", t.forward_algorithms);
        bind_symbol(handle, file, "cudnnGetConvolutionForwardWorkspaceSize", t.forward_workspace);
        bind_symbol(handle, file, "cudnnConvolutionForward", t.forward);
        bind_symbol(handle, file, "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                    t.backward_data_algorithms);
        bind_symbol(handle, file, "cudnnGetConvolutionBackwardDataWorkspaceSize",
                    t.backward_data_workspace);
        bind_symbol(handle, file, "cudnnConvolutionBackwardData", t.backward_data);
        bind_symbol(handle, file, "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                    t.backward_filter_algorithms);
        bind_symbol(handle, file, "cudnnGetConvolutionBackwardFilterWorkspaceSize",
                    t.backward_filter_workspace);
        bind_symbol(handle, file, "cudnnConvolutionBackwardFilter", t.backward_filter);
      });
  return library.get();
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
