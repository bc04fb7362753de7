#!/usr/bin/env bash
# Memory per rank and bytes per step for d12 (GPT-2 124M) on 8 and 64 ranks, every mesh and
# ZeRO stage, in fp32 and in bf16 (params and reduce), from the planner alone (nothing is
# trained), next to the formulas of docs/SHARDING.md ("ZeRO stages").
# Usage: benchmarks/plan_d12.sh [extra flags for shardtrain plan, e.g. --micro-batch 8]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benchmarks/build_cli.sh
. benchmarks/build_cli.sh
build_cli plan_d12 || exit 1
for dtype in fp32 bf16; do
  for ranks in 8 64; do
    bazel-bin/engine/cli/shardtrain plan --model d12 --ranks "$ranks" --micro-batch 4 --seq-len 1024 \
      --gpu-gib 80 --param-dtype "$dtype" --reduce-dtype "$dtype" "$@"
    echo
  done
done
