#!/usr/bin/env bash
# Predicted scaling of a model over 8 to 1024 GPUs for several sharding configurations: one
# shard group of all GPUs at ZeRO-1, -2 and -3, and hybrid ZeRO-3 (shard inside a node,
# replicate across nodes), at a fixed micro-batch per GPU. Writes the CSV and draws
# tokens/s per GPU and MFU against the number of GPUs (tools/plot_scaling.py).
# Usage: benchmarks/scaling_sweep.sh OUT.png [extra simulate flags; default: d48 on h100]
set -euo pipefail
cd "$(dirname "$0")/.."
png=$1
shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--gpu h100 --model d48 --micro-batch 4)
# shellcheck source=benchmarks/build_cli.sh
. benchmarks/build_cli.sh
build_cli scaling_sweep || exit 1
csv="${png%.png}.csv"
bazel-bin/engine/cli/shardtrain simulate "${flags[@]}" --sweep 8,16,32,64,128,256,512,1024 \
  --configs zero1,zero2,zero3,hsdp3 --csv "$csv"
# Debian's python3 has matplotlib (python3-matplotlib); another python3 first on PATH may not.
py=python3
python3 -c 'import matplotlib' 2>/dev/null || py=/usr/bin/python3
"$py" tools/plot_scaling.py "$csv" "$png" --title "shardtrain simulate ${flags[*]} (uncalibrated GPU row)"
