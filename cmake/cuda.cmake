# The CUDA backend (src/tandem/cuda): on when TANDEM_WITH_CUDA is ON, or AUTO
# and the toolkit with cuBLASLt, cuDNN and NCCL is found; sets
# TANDEM_HAVE_CUDA (0/1) for config.h and the tandem_cuda_deps target.
# Without a GPU the code still compiles and the GPU tests say they did not run.
set(TANDEM_HAVE_CUDA 0)
if(NOT TANDEM_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (the H100/H200 the device checks run on), with its PTX for
      # later chips. Set CMAKE_CUDA_ARCHITECTURES for others (e.g. "80;90").
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 dialect for nvcc (CUDA 12+ has one); without
    # this, every target that requires C++20 refuses its CUDA sources.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    find_package(CUDAToolkit)
  endif()
  if(CUDAToolkit_FOUND)
    find_library(TANDEM_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_library(TANDEM_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(TANDEM_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_path(TANDEM_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt AND TANDEM_NCCL_LIBRARY AND TANDEM_CUDNN_LIBRARY
     AND TANDEM_NCCL_INCLUDE AND TANDEM_CUDNN_INCLUDE)
    set(TANDEM_HAVE_CUDA 1)
    add_library(tandem_cuda_deps INTERFACE)
    target_include_directories(tandem_cuda_deps INTERFACE ${TANDEM_NCCL_INCLUDE}
                               ${TANDEM_CUDNN_INCLUDE})
    # cuBLASLt, cuDNN and NCCL are loaded on first use (kernels/cuda/
    # libraries.cc, comm/cuda/nccl_library.cc), not linked: only their
    # headers are needed here.
    target_link_libraries(tandem_cuda_deps INTERFACE CUDA::cudart ${CMAKE_DL_LIBS})
    message(STATUS "tandem: CUDA backend on (toolkit ${CUDAToolkit_VERSION}, "
                   "architectures ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(TANDEM_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TANDEM_WITH_CUDA=ON but the CUDA toolkit with cuBLASLt, cuDNN and NCCL "
                        "was not found (nvcc: '${CMAKE_CUDA_COMPILER}')")
  else()
    message(STATUS "tandem: CUDA backend off (no CUDA toolkit with cuBLASLt, cuDNN and NCCL)")
  endif()
endif()
