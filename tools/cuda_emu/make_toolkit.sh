#!/usr/bin/env bash
# make_toolkit.sh OUT - assembles the CUDA emulation as a directory Bazel takes for a CUDA
# toolkit (third_party/cuda/cuda_configure.bzl): OUT/bin/nvcc (the fake compiler), OUT/include
# (cuda_runtime.h, cublasLt.h, nccl.h, mma.h, cub's radix sort, the 16-bit types),
# OUT/lib64/libcudart_static.a (runtime and launcher), libcublasLt.so (under the real one's
# soname libcublasLt.so.13, by which the backend opens it at run time) and libnccl.so.
# tools/cuda_emu/run_tests.sh builds it and the GPU tests against it; docs/BUILD.md says what
# the emulation checks and what it cannot.
set -euo pipefail

out=${1:?usage: make_toolkit.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
gxx=${CUDA_EMU_GXX:-g++}
flags=(-std=c++20 -O2 -g -fPIC -pthread -Wall -Wextra -Werror -I"$here/include")

mkdir -p "$out/bin" "$out/include" "$out/lib64"
cp -r "$here/include/." "$out/include/"
install -m 755 "$here/nvcc" "$out/bin/nvcc"
objects=$(mktemp -d)
trap 'rm -rf "$objects"' EXIT
for part in runtime launch streams; do
  "$gxx" "${flags[@]}" -DCUDA_EMU_DEVICE=1 -c "$here/src/$part.cc" -o "$objects/$part.o"
done
rm -f "$out/lib64/libcudart_static.a"
ar rcs "$out/lib64/libcudart_static.a" "$objects/runtime.o" "$objects/launch.o" "$objects/streams.o"
"$gxx" "${flags[@]}" -shared -Wl,-soname,libcublasLt.so.13 "$here/src/cublaslt.cc" \
  -o "$out/lib64/libcublasLt.so.13"
ln -sf libcublasLt.so.13 "$out/lib64/libcublasLt.so"
"$gxx" "${flags[@]}" -shared "$here/src/nccl.cc" -o "$out/lib64/libnccl.so"
echo "cuda_emu: toolkit in $out"
