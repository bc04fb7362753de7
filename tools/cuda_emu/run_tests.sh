#!/usr/bin/env bash
# run_tests.sh [TARGET...] - runs GPU tests on the CPU against the CUDA emulation: builds the
# emulated toolkit (make_toolkit.sh) and the targets with Bazel pointed at it, in an output base
# of their own, and tests them (default: the kernel tests, the op vocabulary, the cast test, and
# the collectives and a unit's stream-ordered gather and reduction on 1 and 2 ranks, NCCL among
# them, the public unit calls on 4, and a stream's wait for a collective that never finishes).
# ST_TEST_REQUIRE_GPU=1 makes a SKIP a failure: a test
# that did not find the emulated device has run nothing on it. With CUDA_EMU_ASAN=1 everything, the kernels included, is built with AddressSanitizer
# and UndefinedBehaviorSanitizer (--config=asan; its own output base): an access past the end of
# a device buffer faults where the GPU would need compute-sanitizer to see it. CUDA_EMU_ASYNC=1
# (and CUDA_EMU_SEED) pass through to the tests: streams run asynchronously, each on a worker
# thread, so a missing stream wait or a host read before a sync shows. What a pass means,
# and what only a GPU can check: docs/BUILD.md, "The CUDA emulation". The backend opens cuBLASLt
# by its soname (kernels/cuda/cublaslt_library.h): LD_LIBRARY_PATH puts the emulated one before
# a real toolkit's that the loader's cache may name.
set -euo pipefail

cd "$(dirname "$0")/../.."
base=${CUDA_EMU_OUTPUT_BASE:-$HOME/.cache/shardtrain-cudaemu}
toolkit=$base/toolkit
tools/cuda_emu/make_toolkit.sh "$toolkit"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(//tests/kernels:all //tests/gpu:cast_test //tests/gpu:ops_vocab_test
    //tests/sharding:collectives_gpu_test_np{1,2} //tests/sharding:collectives_nccl_hostid_test
    //tests/sharding:unit_streams_gpu_test_np{1,2} //tests/sharding:public_unit_gpu_test_np4
    //tests/sharding:device_wait_timeout_test)
fi
build=(--output_base="$base/bazel")
flags=()
if [ "${CUDA_EMU_ASAN:-0}" = 1 ]; then
  build=(--output_base="$base/bazel-asan")
  flags=(--config=asan
    "--action_env=CUDA_EMU_CXXFLAGS=-fsanitize=address,undefined -fno-sanitize-recover=undefined")
fi
bazel "${build[@]}" test --repo_env=ST_CUDA_PATH="$toolkit" --symlink_prefix=/ \
  --test_output=errors --test_timeout=3600 --test_env=OPS_VOCAB_EMULATED=1 \
  --test_env=ST_TEST_REQUIRE_GPU=1 \
  --test_env=LD_LIBRARY_PATH="$toolkit/lib64" \
  --test_env=CUDA_EMU_ASYNC --test_env=CUDA_EMU_SEED "${flags[@]}" "${targets[@]}"
