# shellcheck shell=bash
# gpu_bundle_targets.sh - sourced by tools/gpu_bundle.sh and tools/cuda_emu/rehearse_suite.sh:
# the binaries the GPU suite (tests/gpu/run_gpu_suite.sh) runs, as paths under bazel-bin
# (bundle_binaries) and as Bazel labels (bundle_targets). Run from the project root.
bundle_binaries=(engine/cli/shardtrain tests/gpu/cast_test tests/gpu/offload_test
  tests/gpu/ops_vocab_test tests/core/device_cuda_test tests/sharding/collectives_gpu_test_bin
  tests/sharding/unit_streams_gpu_test_bin tests/sharding/public_unit_gpu_test_bin
  tests/sharding/timeout_skipper)
for t in tests/kernels/*_test.c; do bundle_binaries+=("${t%.c}"); done
bundle_binaries+=(benchmarks/ceilings benchmarks/op_timings benchmarks/mpi_p2p)
bundle_targets=()
for t in "${bundle_binaries[@]}"; do bundle_targets+=("//${t%/*}:${t##*/}"); done
