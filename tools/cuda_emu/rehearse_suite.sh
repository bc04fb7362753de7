#!/usr/bin/env bash
# rehearse_suite.sh SECTION... - runs sections of the GPU suite (tests/gpu/run_gpu_suite.sh) on
# the CPU, against the CUDA emulation: builds the bundle's binaries (tools/gpu_bundle_targets.sh)
# with Bazel pointed at the emulated toolkit (make_toolkit.sh; the output base of run_tests.sh),
# lays them out as tools/gpu_bundle.sh does in $CUDA_EMU_OUTPUT_BASE/bundle, and runs the suite
# there (logs in its logs/), so that a change to the suite's scripts is tried before device time.
# CUDA_EMU_ASYNC and CUDA_EMU_SEED pass through; OPS_VOCAB_EMULATED=1 leaves out the shapes the
# emulation is too slow for; SUITE_EMULATED=1 leaves nvidia-smi and the GPU machine's libraries
# out of the preflight; every time bound of the suite is SUITE_TIME_SCALE (default 10) times the
# GPU's (ops_vocab_test takes 80 s of its 3000), SUITE_BUDGET's default with it. As the device
# tool does, it gives the suite an emptied OUT ($CUDA_EMU_OUTPUT_BASE/out, unless OUT is set),
# so suite.log, summary.txt and logs.tar.xz are made as on the GPU machine. On 2 cores: ops
# 52 s, streams 13 s (2026-11-29), equivalence 47 minutes; train and d12 take hours (past their bounds).
# What the emulation cannot stand in for: docs/BUILD.md, "The CUDA emulation".
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,14p' "$0"; exit 2; }
cd "$(dirname "$0")/../.."
base=${CUDA_EMU_OUTPUT_BASE:-$HOME/.cache/shardtrain-cudaemu}
toolkit=$base/toolkit
tools/cuda_emu/make_toolkit.sh "$toolkit"
# shellcheck source=tools/gpu_bundle_targets.sh
. tools/gpu_bundle_targets.sh
bazel --output_base="$base/bazel" build --repo_env=ST_CUDA_PATH="$toolkit" --symlink_prefix=/ \
  "${bundle_targets[@]}"
bin=$(bazel --output_base="$base/bazel" info --repo_env=ST_CUDA_PATH="$toolkit" bazel-bin)
bundle=$base/bundle
rm -rf "${bundle:?}/bin" && mkdir -p "$bundle/bin"
for p in "${bundle_binaries[@]}"; do cp -L "$bin/$p" "$bundle/bin/"; done
cp tests/nccl_hostid.sh "$bundle/bin/nccl-hostid"
echo "$(git describe --always --dirty) (emulated)" > "$bundle/version.txt"
export LD_LIBRARY_PATH=$toolkit/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OPS_VOCAB_EMULATED=1 SUITE_EMULATED=1 SUITE_TIME_SCALE=${SUITE_TIME_SCALE:-10}
if [ -z "${OUT:-}" ]; then
  export OUT=$base/out
  rm -rf "$OUT" && mkdir -p "$OUT"
fi
exec bash tests/gpu/run_gpu_suite.sh "$bundle" "$@"
