#!/usr/bin/env bash
# Copies the dependencies (Asio, Eigen, Catch2 with its CMake helpers, CLI11,
# nlohmann-json, OpenSSL's libcrypto headers and library) from this Debian
# machine into .deps/ (git-ignored), so that tools/gpu/torch_check.sh can
# build on a GPU machine without a package manager
# (cmake/CollieDependencies.cmake looks there after the system).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .deps && mkdir -p .deps/include .deps/lib/cmake/Catch2
cp -r /usr/include/asio /usr/include/asio.hpp .deps/include/
cp -r /usr/include/eigen3 .deps/include/
cp -r /usr/include/catch2 .deps/include/
cp -r /usr/include/CLI .deps/include/
cp -r /usr/include/nlohmann .deps/include/
mkdir -p .deps/openssl/include .deps/openssl/lib
cp -r /usr/include/openssl .deps/openssl/include/
cp /usr/include/x86_64-linux-gnu/openssl/*.h .deps/openssl/include/openssl/
cp -P /usr/lib/x86_64-linux-gnu/libcrypto.so /usr/lib/x86_64-linux-gnu/libcrypto.so.3 .deps/openssl/lib/
cp /usr/lib/cmake/Catch2/*.cmake .deps/lib/cmake/Catch2/
du -sh .deps
