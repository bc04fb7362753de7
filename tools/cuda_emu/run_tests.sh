#!/usr/bin/env bash
# run_tests.sh [TARGET...] - runs GPU tests on the CPU against the CUDA emulation: builds the
# emulated toolkit (make_toolkit.sh) and the targets with Bazel pointed at it, in an output base
# of their own, and tests them (default: the op vocabulary and the cast test). What a pass
# means, and what only a GPU can check: docs/BUILD.md, "The CUDA emulation".
set -euo pipefail

cd "$(dirname "$0")/../.."
base=${CUDA_EMU_OUTPUT_BASE:-$HOME/.cache/shardtrain-cudaemu}
toolkit=$base/toolkit
tools/cuda_emu/make_toolkit.sh "$toolkit"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(//tests/gpu:cast_test //tests/gpu:ops_vocab_test)
fi
bazel --output_base="$base/bazel" test --repo_env=ST_CUDA_PATH="$toolkit" --symlink_prefix=/ \
  --test_output=errors --test_timeout=3600 --test_env=OPS_VOCAB_EMULATED=1 "${targets[@]}"
