# COLLIE_WITH_TORCH: the PyTorch 2.x backend (runtime/torch, the Python
# package collie_torch). It is built against the torch installed for
# COLLIE_TORCH_PYTHON: under `pip install .` (scikit-build-core) that is the
# interpreter pip runs, so the wheel matches the environment it goes into;
# in a plain CMake build pass -DCOLLIE_TORCH_PYTHON=/path/to/venv/bin/python.
#   AUTO (default)  built when that Python imports torch 2.x
#   ON              configure fails, naming what is missing
#   OFF             never looked for
# The result is COLLIE_HAVE_TORCH (0/1); COLLIE_TORCH_MISSING says why it is 0.
#
# torch's CMake package (TorchConfig.cmake) is not used: on a CUDA build of
# torch it insists on finding CUDA, cuDNN and NVTX the way torch was built.
# What an extension needs is what torch.utils.cpp_extension uses: torch's
# include folders (pybind11 among them: it must be torch's own, or torch does
# not recognise the Backend the module returns), its libraries, and the C++
# ABI flag it was built with. The CUDA path (runtime/torch/cuda_path.cc) is
# compiled when collie has NCCL and torch has CUDA.
set(COLLIE_WITH_TORCH AUTO CACHE STRING "Build the PyTorch backend collie_torch: AUTO, ON or OFF")
set_property(CACHE COLLIE_WITH_TORCH PROPERTY STRINGS AUTO ON OFF)
set(_collie_torch_python_default "")
if(DEFINED SKBUILD AND Python_EXECUTABLE)
  set(_collie_torch_python_default ${Python_EXECUTABLE})
endif()
set(COLLIE_TORCH_PYTHON "${_collie_torch_python_default}" CACHE FILEPATH
    "The Python interpreter whose torch (2.x) the collie_torch module is built against")
set(COLLIE_HAVE_TORCH 0)
set(COLLIE_TORCH_MISSING "")
set(COLLIE_TORCH_HAS_CUDA_PATH 0)

if(NOT COLLIE_WITH_TORCH MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "COLLIE_WITH_TORCH=${COLLIE_WITH_TORCH}: expected AUTO, ON or OFF")
endif()

if(COLLIE_WITH_TORCH STREQUAL "OFF")
  set(COLLIE_TORCH_MISSING "configured with -DCOLLIE_WITH_TORCH=OFF")
elseif(NOT COLLIE_TORCH_PYTHON)
  set(COLLIE_TORCH_MISSING "no torch 2.x Python given (-DCOLLIE_TORCH_PYTHON=venv/bin/python, or pip install . in that environment)")
else()
  # -I: the environment's own site-packages, not the build-isolation overlay
  # pip puts on PYTHONPATH (which has scikit-build-core, not torch).
  execute_process(
    COMMAND ${COLLIE_TORCH_PYTHON} -I ${CMAKE_CURRENT_LIST_DIR}/torch_probe.py
    OUTPUT_VARIABLE _probe OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_VARIABLE _probe_err RESULT_VARIABLE _probe_rc)
  if(NOT _probe_rc EQUAL 0)
    string(STRIP "${_probe_err}" _probe_err)
    string(REGEX REPLACE ".*\n" "" _probe_err "${_probe_err}")
    set(COLLIE_TORCH_MISSING "${COLLIE_TORCH_PYTHON} has no usable torch 2.x (${_probe_err}); pip install torch into that environment first")
  else()
    # One "key=value" per line.
    string(REPLACE "\n" ";" _probe "${_probe}")
    foreach(_line ${_probe})
      if(_line MATCHES "^([a-z0-9_]+)=(.*)$")
        set(_torch_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
      endif()
    endforeach()
    set(COLLIE_TORCH_VERSION ${_torch_version})
    set(COLLIE_TORCH_EXT_SUFFIX ${_torch_ext_suffix})
    if(NOT _torch_cxx11_abi STREQUAL "1")
      set(COLLIE_TORCH_MISSING "torch ${_torch_version} was built with the pre-C++11 string ABI, which collie's libraries do not use")
    else()
      set(COLLIE_HAVE_TORCH 1)
    endif()
  endif()
endif()

if(COLLIE_HAVE_TORCH)
  string(REPLACE "|" ";" _torch_includes "${_torch_includes}")
  set(_torch_libs)
  foreach(_l c10 torch torch_cpu torch_python)
    list(APPEND _torch_libs ${_torch_lib_dir}/lib${_l}.so)
  endforeach()
  add_library(collie_torch_headers INTERFACE)
  target_include_directories(collie_torch_headers SYSTEM INTERFACE ${_torch_includes}
                             ${_torch_python_include})
  target_compile_definitions(collie_torch_headers INTERFACE _GLIBCXX_USE_CXX11_ABI=1
                             COLLIE_TORCH_BUILT_FOR="${_torch_version}")
  if(_torch_gather_into_tensor STREQUAL "1")
    target_compile_definitions(collie_torch_headers INTERFACE COLLIE_TORCH_HAS_GATHER_INTO_TENSOR)
  endif()
  target_link_libraries(collie_torch_headers INTERFACE ${_torch_libs})
  if(NOT _torch_cuda STREQUAL "None" AND COLLIE_HAVE_NCCL AND EXISTS ${_torch_lib_dir}/libc10_cuda.so)
    set(COLLIE_TORCH_HAS_CUDA_PATH 1)
    target_link_libraries(collie_torch_headers INTERFACE ${_torch_lib_dir}/libc10_cuda.so
                          ${_torch_lib_dir}/libtorch_cuda.so CUDA::cudart)
    set(COLLIE_TORCH_CUDA "CUDA tensors through NCCL")
  elseif(_torch_cuda STREQUAL "None")
    set(COLLIE_TORCH_NO_CUDA_REASON "torch ${_torch_version} is built without CUDA")
  else()
    set(COLLIE_TORCH_NO_CUDA_REASON "collie_torch was built without NCCL (no CUDA toolkit with nccl.h where it was built)")
  endif()
  if(NOT COLLIE_TORCH_HAS_CUDA_PATH)
    set(COLLIE_TORCH_CUDA "CPU tensors only: ${COLLIE_TORCH_NO_CUDA_REASON}")
  endif()
  message(STATUS "collie: building collie_torch for torch ${_torch_version} "
                 "(${COLLIE_TORCH_PYTHON}); ${COLLIE_TORCH_CUDA}")
elseif(COLLIE_WITH_TORCH STREQUAL "ON")
  message(FATAL_ERROR "COLLIE_WITH_TORCH=ON but ${COLLIE_TORCH_MISSING}.")
else()
  message(STATUS "collie: the PyTorch backend is not built: ${COLLIE_TORCH_MISSING}")
endif()
