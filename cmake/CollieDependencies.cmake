# Every dependency is a Debian package (tools/collie.sh installs them). Asio is
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

# nlohmann/json (header-only; Debian: nlohmann-json3-dev): every JSON collie
# writes or reads (flight-recorder state, error records, traces).
find_path(NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp PATHS /usr/include ${_collie_extra_includes})
if(NOT NLOHMANN_JSON_INCLUDE_DIR)
  message(FATAL_ERROR "nlohmann/json.hpp not found: install the Debian package nlohmann-json3-dev")
endif()
add_library(collie_json INTERFACE)
target_include_directories(collie_json SYSTEM INTERFACE
  $<BUILD_INTERFACE:${NLOHMANN_JSON_INCLUDE_DIR}>)
install(TARGETS collie_json EXPORT collieTargets)

# Eigen: Debian's package config (Eigen3::Eigen), else the carried headers.
find_package(Eigen3 3.3 CONFIG QUIET)
if(NOT TARGET Eigen3::Eigen)
  find_path(EIGEN3_INCLUDE_DIR Eigen/Core PATHS /usr/include/eigen3
            ${_collie_extra_includes}/eigen3 ${_collie_extra_includes})
  if(NOT EIGEN3_INCLUDE_DIR AND COLLIE_BUILD_NN)
    message(FATAL_ERROR "Eigen not found: install the Debian package libeigen3-dev")
  endif()
  if(EIGEN3_INCLUDE_DIR)
    add_library(Eigen3::Eigen INTERFACE IMPORTED)
    set_target_properties(Eigen3::Eigen PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${EIGEN3_INCLUDE_DIR})
  endif()
endif()
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp PATHS /usr/include ${_collie_extra_includes})
find_package(ZLIB)
