# Every dependency is a Debian package (see tools/setup.sh). Asio is
# standalone and header-only; a carried copy under .deps/ (for the GPU machine,
# which has no apt) is searched after the system.
set(_collie_extra_includes ${CMAKE_SOURCE_DIR}/.deps/include)

find_path(ASIO_INCLUDE_DIR asio.hpp PATHS /usr/include ${_collie_extra_includes})
if(NOT ASIO_INCLUDE_DIR)
  message(FATAL_ERROR "asio.hpp not found: install the Debian package libasio-dev")
endif()
add_library(collie_asio INTERFACE)
target_include_directories(collie_asio SYSTEM INTERFACE $<BUILD_INTERFACE:${ASIO_INCLUDE_DIR}>)
target_compile_definitions(collie_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(collie_asio INTERFACE Threads::Threads)
install(TARGETS collie_asio EXPORT collieTargets)

find_path(EIGEN3_INCLUDE_DIR Eigen/Core PATHS /usr/include/eigen3
          ${_collie_extra_includes}/eigen3 ${_collie_extra_includes})
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp PATHS /usr/include ${_collie_extra_includes})
find_package(ZLIB)
