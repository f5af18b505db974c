#pragma once
// cuBLASLt and cuDNN, loaded when first used (dlopen) rather than linked
// (NCCL likewise, comm/cuda/nccl_library.h): they are hundreds of megabytes
// (cuBLASLt 540 MB, NCCL 220 MB here)
// that every tandem process would map and partly touch at start, about
// 130 MB more resident memory in a run that never uses a GPU. Only their
// headers' types are used at build time.

#include <cublasLt.h>

// cuDNN 9 marks the convolution API tandem uses (descriptors and
// cudnnConvolution*) deprecated in favour of its graph API; it is still
// there and supported in 9.x.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>

#include <cstddef>
#include <string>

namespace tandem::cuda {

struct CublasLt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtGetVersion) get_version;
  decltype(&cublasLtGetStatusName) status_name;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};

// Loaded on first call; throws Error naming the library (and how to find
// it: LD_LIBRARY_PATH) when it cannot be loaded.
const CublasLt& cublaslt();

struct Cudnn {
  decltype(&cudnnCreate) create;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnCreateTensorDescriptor) tensor_create;
  decltype(&cudnnSetTensor4dDescriptor) tensor_set_4d;
  decltype(&cudnnDestroyTensorDescriptor) tensor_destroy;
  decltype(&cudnnCreateFilterDescriptor) filter_create;
  decltype(&cudnnSetFilter4dDescriptor) filter_set_4d;
  decltype(&cudnnDestroyFilterDescriptor) filter_destroy;
  decltype(&cudnnCreateConvolutionDescriptor) convolution_create;
  decltype(&cudnnSetConvolution2dDescriptor) convolution_set_2d;
  decltype(&cudnnSetConvolutionMathType) convolution_set_math;
  decltype(&cudnnDestroyConvolutionDescriptor) convolution_destroy;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) forward_algorithms;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) forward_workspace;
  decltype(&cudnnConvolutionForward) forward;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) backward_data_algorithms;
  decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) backward_data_workspace;
  decltype(&cudnnConvolutionBackwardData) backward_data;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) backward_filter_algorithms;
  decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) backward_filter_workspace;
  decltype(&cudnnConvolutionBackwardFilter) backward_filter;
};

// As cublaslt(), for cuDNN (libcudnn.so.9, which loads its sub-libraries).
const Cudnn& cudnn();

// "9.19.0", or "not found" when the library cannot be loaded.
std::string cublaslt_version();
std::string cudnn_version();

}  // namespace tandem::cuda

#pragma GCC diagnostic pop
