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

# OpenSSL's libcrypto (Debian: libssl-dev): SHA-256 and HMAC-SHA256 for the
# job secret's handshakes (base/sha256.*). collie_base links it privately; a
# static collie_base still names it in the export, so collieConfig.cmake
# finds it for consumers. A machine without the headers (the GPU machine)
# may carry them, with a libcrypto.so link, in .deps/openssl/{include,lib}.
find_package(OpenSSL 3.0 QUIET COMPONENTS Crypto)
if(NOT TARGET OpenSSL::Crypto AND EXISTS ${CMAKE_SOURCE_DIR}/.deps/openssl/include/openssl/evp.h)
  set(OPENSSL_ROOT_DIR ${CMAKE_SOURCE_DIR}/.deps/openssl)
  find_package(OpenSSL 3.0 QUIET COMPONENTS Crypto)
endif()
if(NOT TARGET OpenSSL::Crypto)
  message(FATAL_ERROR "OpenSSL 3 libcrypto not found: install the Debian package libssl-dev")
endif()

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
