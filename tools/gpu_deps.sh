#!/usr/bin/env bash
# Copies the header-only dependencies (Asio, Eigen, Catch2 with its CMake
# helpers, CLI11) from this Debian machine into .deps/ (git-ignored), so that
# tools/gpu/torch_check.sh can build on a GPU machine without a package manager.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .deps && mkdir -p .deps/include .deps/lib/cmake/Catch2
cp -r /usr/include/asio /usr/include/asio.hpp .deps/include/
cp -r /usr/include/eigen3 .deps/include/
cp -r /usr/include/catch2 .deps/include/
cp -r /usr/include/CLI .deps/include/
cp /usr/lib/cmake/Catch2/*.cmake .deps/lib/cmake/Catch2/
du -sh .deps
