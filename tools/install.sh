#!/usr/bin/env bash
# Installs libshardtrain for programs built outside Bazel (CMake, Make):
#   tools/install.sh PREFIX [BAZEL_BUILD_FLAGS...]     e.g. tools/install.sh /opt/shardtrain
# builds //install (libshardtrain.so, libshardtrain.a and what the archive links to) with the
# given flags (--config=nocuda for a CPU-only library) and lays it out under PREFIX with
# install/layout.sh: lib/libshardtrain.{so,a}, include/shardtrain.h, the pkg-config file
# lib/pkgconfig/shardtrain.pc and the CMake package lib/cmake/shardtrain (docs/API.md).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 PREFIX [BAZEL_BUILD_FLAGS...]" >&2
  exit 2
fi
prefix=$(realpath -m "$1")
shift
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build "$@" //install:libshardtrain //install:libshardtrain.so
bin=$(bazel info "$@" bazel-bin)/install
bash install/layout.sh "$prefix" "$bin/libshardtrain.so" "$bin/libshardtrain.a" \
  "$bin/libshardtrain.link" include/shardtrain.h
echo "installed libshardtrain under $prefix"
