# FmhpcCUDA.cmake: the optional CUDA backend. include() after project().
# FMHPC_CUDA=AUTO (on when nvcc is found) | ON (fail without nvcc) | OFF.
# Sets FMHPC_HAVE_CUDA and the imported target NCCL::nccl; CUDA::cudart and
# CUDA::cublasLt (its file: gemm.cu opens it at run time) come from FindCUDAToolkit.
set(FMHPC_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE FMHPC_CUDA PROPERTY STRINGS AUTO ON OFF)
set(FMHPC_HAVE_CUDA FALSE)

if(NOT FMHPC_CUDA STREQUAL "OFF")
  # A non-login shell lacks /etc/profile.d/cuda.sh's PATH: look where the
  # toolkit installs unless the user pointed CMake elsewhere.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS "/usr/local/cuda/bin/nvcc")
    set(ENV{CUDACXX} "/usr/local/cuda/bin/nvcc")
  endif()
  # Before enable_language, or nvcc's default (sm_75) wins. 80 = A100,
  # 90 = H100/H200. "native" fails on machines without a GPU (CI).
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA SM architectures")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    # One runtime: CMake links static cudart by default, CUDA::cudart is shared.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
    if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      message(FATAL_ERROR "fmhpc: CUDA found but NCCL not; set NCCL_HOME or -DFMHPC_CUDA=OFF")
    endif()
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    set(FMHPC_HAVE_CUDA TRUE)
    message(STATUS "fmhpc CUDA backend: CUDA ${CUDAToolkit_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}, NCCL ${NCCL_LIBRARY}")
  elseif(FMHPC_CUDA STREQUAL "ON")
    message(FATAL_ERROR "fmhpc: FMHPC_CUDA=ON but no CUDA compiler found (set CUDACXX or put nvcc on PATH)")
  else()
    message(STATUS "fmhpc CUDA backend: off (no nvcc found)")
  endif()
endif()
