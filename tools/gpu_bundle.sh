#!/usr/bin/env bash
# gpu_bundle.sh - builds everything the GPU suite runs and packs it for the GPU machine, which
# has CUDA, NCCL and MPI but no Bazel: the binaries (with ../shared/tools/gpu-bundle: the
# libraries that machine lacks and an env.sh) into gpu/, and the fortunes text the byte-level
# data is made from into gpu/fortunes (that machine has no fortunes package), all compressed
# into gpu/bundle.tar.xz beside env.sh and version.txt (the commit built, which
# benchmarks/gpu_bench.sh records). The bundle also carries benchmarks/ceilings for that
# benchmark (docs/PERFORMANCE.md), and op_timings and mpi_p2p for the simulator's GPU
# calibration (the suite's calibrate section, benchmarks/hardware/measure_gpu.sh). Then, with
# the device tool, carry `gpu` and run on the GPU machine, section by section (each under the
# 10-minute limit of one command; docs/BUILD.md plans a session's 15 minutes):
#   source gpu/env.sh && bash tests/gpu/run_gpu_suite.sh gpu ops train streams
#   source gpu/env.sh && bash tests/gpu/run_gpu_suite.sh gpu equivalence d12
#   source gpu/env.sh && bash tests/gpu/run_gpu_suite.sh gpu sanitizer
#   source gpu/env.sh && bash tests/gpu/run_gpu_suite.sh gpu calibrate
# (tests/gpu/run_gpu_suite.sh lists the sections and what each checks.)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/gpu_bundle_targets.sh
. tools/gpu_bundle_targets.sh
[ -f third_party/cudnn_frontend/include/cudnn_frontend.h ] ||
  echo "gpu_bundle: no cuDNN frontend headers (tools/setup.sh installs them): this bundle has" \
    "no cuDNN attention, and ops_vocab_test will fail on ST_CUDA_ATTENTION=cudnn" >&2
bazel build "${bundle_targets[@]}"
../shared/tools/gpu-bundle gpu "${bundle_binaries[@]}"
git describe --always --dirty > gpu/version.txt
mkdir -p gpu/fortunes
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' \
  -exec cp {} gpu/fortunes/ \;
# The device tool carries at most 64 MiB; two dozen binaries that each hold the CUDA runtime
# and OpenBLAS come to about 110 MiB, and xz's window finds what they share: about 11 MiB.
# run_gpu_suite.sh unpacks it on the GPU machine.
tar -cf - -C gpu bin lib fortunes | xz -T2 -6 > gpu/bundle.tar.xz
rm -rf gpu/bin gpu/lib gpu/fortunes
du -sh gpu
