#!/usr/bin/env bash
# The README's main job: installs what is missing, builds shardtrain, and shows what the engine
# can do so far:
#   1. the collective self-test on 4 ranks arranged as a 1 x 2 x 2 mesh (dp_replicate x
#      dp_shard x tp): every collective on every group, checked, with time and bandwidth;
#   2. training the tiny GPT on the byte-level fortunes corpus (prepared into data/fortunes)
#      on the same 4-rank mesh: tensor parallelism 2 x ZeRO-3 over a shard group of 2, bf16
#      parameters and gradient reductions; evaluating every 100 steps, writing metrics to
#      data/demo/metrics.jsonl and a Hugging Face GPT-2 export (fp32 master weights) to
#      data/demo/model.safetensors;
#   3. plotting the run's loss and throughput against tokens into data/demo/loss.png.
# Extra arguments go to `shardtrain train` (e.g. --steps 1000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //engine:shardtrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

echo "== collective self-test, 4 ranks"
mpirun -np 4 --oversubscribe --bind-to none bazel-bin/engine/shardtrain selftest \
  --dp-replicate 1 --dp-shard 2 --tp 2

echo "== training the tiny GPT on the fortunes corpus: 4 ranks, tp 2 x dp-shard 2, ZeRO-3, bf16"
[ -f data/fortunes/bytes_val_000000.bin ] || python3 tools/prepare_bytes.py --out-dir data/fortunes
mkdir -p data/demo
rm -f data/demo/metrics.jsonl
mpirun -np 4 --oversubscribe --bind-to none bazel-bin/engine/shardtrain train --model tiny \
  --tp 2 --dp-shard 2 --zero 3 --param-dtype bf16 --reduce-dtype bf16 \
  --data-train 'data/fortunes/bytes_train_*.bin' --data-val 'data/fortunes/bytes_val_*.bin' \
  --steps 400 --micro-batch 8 --lr 3e-3 --warmup 20 --min-lr 3e-4 --eval-every 100 \
  --metrics data/demo/metrics.jsonl --export data/demo/model.safetensors "$@"
echo "== plotting the run"
tools/plot_metrics.py data/demo/metrics.jsonl --labels "tiny: tp 2 x dp-shard 2 (ZeRO-3) in bf16" \
  --out data/demo/loss.png
