# COLLIE_WITH_CUDA / COLLIE_WITH_NCCL: AUTO builds the GPU targets when the
# toolkit (and nccl.h) are found, ON fails here when they are missing, OFF
# never looks. The result lands in COLLIE_HAVE_CUDA / COLLIE_HAVE_NCCL (0/1),
# which config.h and collieConfig.cmake carry.
include(CheckLanguage)
set(COLLIE_HAVE_CUDA 0)
set(COLLIE_HAVE_NCCL 0)

foreach(_opt COLLIE_WITH_CUDA COLLIE_WITH_NCCL)
  if(NOT ${_opt} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${_opt}=${${_opt}}: expected AUTO, ON or OFF")
  endif()
endforeach()

# Where the toolkit lives when nvcc is not on PATH (the standard location).
set(COLLIE_CUDA_ROOT /usr/local/cuda CACHE PATH "CUDA toolkit root searched when nvcc is not on PATH")

if(NOT COLLIE_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS ${COLLIE_CUDA_ROOT}/bin/nvcc)
    set(CMAKE_CUDA_COMPILER ${COLLIE_CUDA_ROOT}/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200) first; Ampere for the common A100.
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    # CMake 3.25 knows no CUDA20 flag for nvcc; .cu files are C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    find_package(CUDAToolkit)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(COLLIE_HAVE_CUDA 1)
    message(STATUS "collie: CUDA ${CUDAToolkit_VERSION} found at ${CUDAToolkit_BIN_DIR}")
  elseif(COLLIE_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "COLLIE_WITH_CUDA=ON but no CUDA toolkit was found "
      "(looked for nvcc on PATH and in ${COLLIE_CUDA_ROOT}/bin). Install the CUDA "
      "toolkit, set CMAKE_CUDA_COMPILER, or configure with -DCOLLIE_WITH_CUDA=OFF.")
  else()
    message(STATUS "collie: no CUDA toolkit found; building the CPU parts only")
  endif()
endif()

if(NOT COLLIE_WITH_NCCL STREQUAL "OFF")
  if(COLLIE_HAVE_CUDA)
    # COLLIE_NCCL_ROOT / NCCL_HOME: e.g. a pip wheel's nvidia/nccl folder,
    # which has libnccl.so.2 but no unversioned libnccl.so.
    find_path(NCCL_INCLUDE_DIR nccl.h
              HINTS ${COLLIE_NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
                 HINTS ${COLLIE_NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib)
  endif()
  if(COLLIE_HAVE_CUDA AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(COLLIE_HAVE_NCCL 1)
    message(STATUS "collie: NCCL found: ${NCCL_LIBRARY}")
  elseif(COLLIE_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "COLLIE_WITH_NCCL=ON but NCCL was not found (needs the "
      "CUDA toolkit and nccl.h/libnccl.so; looked in the toolkit's include and "
      "lib directories and $NCCL_HOME). Configure with -DCOLLIE_WITH_NCCL=OFF "
      "to build without it.")
  else()
    message(STATUS "collie: NCCL not found; the nccl backend is not built")
  endif()
endif()
