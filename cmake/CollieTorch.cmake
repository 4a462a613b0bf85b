# COLLIE_WITH_TORCH: the PyTorch backend (runtime/torch, the Python module
# collie_torch). AUTO builds it when COLLIE_TORCH_PYTHON (/usr/bin/python3,
# the interpreter Debian's python3-torch belongs to) imports torch and
# libtorch-dev's TorchConfig.cmake and pybind11-dev are found; ON fails here
# when one is missing; OFF never looks. The result is COLLIE_HAVE_TORCH (0/1);
# COLLIE_TORCH_MISSING says why it is 0 (the tests print it when they skip).
#
# pybind11 must be the one torch was built with (Debian: 2.10): a module
# built with other pybind11 internals cannot hand torch a ProcessGroup that
# torch recognises.
set(COLLIE_WITH_TORCH AUTO CACHE STRING "Build the PyTorch backend module collie_torch: AUTO, ON or OFF")
set_property(CACHE COLLIE_WITH_TORCH PROPERTY STRINGS AUTO ON OFF)
set(COLLIE_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH
    "The Python interpreter (with torch) the collie_torch module is built for")
set(COLLIE_HAVE_TORCH 0)
set(COLLIE_TORCH_MISSING "")

if(NOT COLLIE_WITH_TORCH MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "COLLIE_WITH_TORCH=${COLLIE_WITH_TORCH}: expected AUTO, ON or OFF")
endif()

if(COLLIE_WITH_TORCH STREQUAL "OFF")
  set(COLLIE_TORCH_MISSING "configured with -DCOLLIE_WITH_TORCH=OFF")
else()
  execute_process(
    COMMAND ${COLLIE_TORCH_PYTHON} -c
      "import sysconfig, torch; print(torch.__version__); print(sysconfig.get_config_var('EXT_SUFFIX')); print(sysconfig.get_python_version())"
    OUTPUT_VARIABLE _collie_py OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_VARIABLE _collie_py_err RESULT_VARIABLE _collie_py_rc)
  if(NOT _collie_py_rc EQUAL 0)
    string(REGEX REPLACE "\n.*" "" _collie_py_err "${_collie_py_err}")
    set(COLLIE_TORCH_MISSING "${COLLIE_TORCH_PYTHON} cannot import torch (${_collie_py_err}); install python3-torch")
  else()
    string(REPLACE "\n" ";" _collie_py "${_collie_py}")
    list(GET _collie_py 0 COLLIE_TORCH_VERSION)
    list(GET _collie_py 1 COLLIE_TORCH_EXT_SUFFIX)
    list(GET _collie_py 2 COLLIE_TORCH_PYTHON_VERSION)
    find_package(Torch CONFIG QUIET)
    # pybind11's CMake finds Python by PYTHON_EXECUTABLE; without it, a
    # python3 earlier on PATH (without torch) would be the one built for.
    set(PYTHON_EXECUTABLE ${COLLIE_TORCH_PYTHON})
    find_package(pybind11 CONFIG QUIET)
    find_library(COLLIE_TORCH_PYTHON_LIBRARY torch_python HINTS ${TORCH_INSTALL_PREFIX}/lib)
    if(NOT Torch_FOUND)
      set(COLLIE_TORCH_MISSING "TorchConfig.cmake not found; install libtorch-dev")
    elseif(NOT pybind11_FOUND)
      set(COLLIE_TORCH_MISSING "pybind11Config.cmake not found; install pybind11-dev")
    elseif(NOT COLLIE_TORCH_PYTHON_LIBRARY)
      set(COLLIE_TORCH_MISSING "libtorch_python not found next to libtorch")
    else()
      set(COLLIE_HAVE_TORCH 1)
    endif()
  endif()
endif()

if(COLLIE_HAVE_TORCH)
  # Under CMAKE_INSTALL_PREFIX; the default prefix /usr/local gives
  # /usr/local/lib/python3.11/dist-packages, on Debian's sys.path.
  set(COLLIE_TORCH_INSTALL_DIR lib/python${COLLIE_TORCH_PYTHON_VERSION}/dist-packages CACHE PATH
      "Where cmake --install puts the collie_torch module (relative: under the prefix)")
  message(STATUS "collie: building the PyTorch backend for torch ${COLLIE_TORCH_VERSION} "
                 "(${COLLIE_TORCH_PYTHON}, pybind11 ${pybind11_VERSION})")
elseif(COLLIE_WITH_TORCH STREQUAL "ON")
  message(FATAL_ERROR "COLLIE_WITH_TORCH=ON but ${COLLIE_TORCH_MISSING}. "
    "Install python3-torch libtorch-dev pybind11-dev (tools/collie.sh install), "
    "or configure with -DCOLLIE_WITH_TORCH=OFF.")
else()
  message(STATUS "collie: the PyTorch backend is not built: ${COLLIE_TORCH_MISSING}")
endif()
