#!/usr/bin/env bash
# The README's main job: installs what is missing, builds shardtrain, and shows what it does:
#   1. the collective self-test on 4 ranks arranged as a 1 x 2 x 2 mesh (dp_replicate x
#      dp_shard x tp): every collective on every group, checked, with time and bandwidth;
#   2. training the tiny GPT on the byte-level fortunes corpus (prepared into data/fortunes) on
#      that 4-rank mesh: tensor parallelism 2 x ZeRO-3 over a shard group of 2, bf16 parameters
#      and gradient reductions, evaluating every 100 steps and writing a checkpoint every 100
#      (a step line every 25 steps; the metrics files hold every step);
#   3. "losing a node": resuming the step-300 checkpoint on 2 ranks without tensor parallelism
#      at ZeRO-2 (the checkpoint is resharded on load) for the last 100 steps;
#   4. inspecting the final checkpoint, exporting it for Hugging Face, drawing the loss curves
#      of both runs, and sampling text from the final model.
# Everything is written under data/demo. Extra arguments go to both `shardtrain train` runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //engine/cli:shardtrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# On a machine with fewer GPUs than the demo's 4 ranks, ranks share a GPU: each gets its own
# NCCL host id (tests/nccl_hostid.sh), so they share it over NCCL's socket transport as the GPU
# suite runs them, not through the MPI fallback's host staging. With a GPU per rank (or none)
# they run as they are, NCCL between GPUs over their own links.
st=(bazel-bin/engine/cli/shardtrain)
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU') || gpus=0
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then # the GPUs the ranks see
  gpus=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c .) || gpus=0
fi
if [ "$gpus" -gt 0 ] && [ "$gpus" -lt 4 ]; then st=(tests/nccl_hostid.sh "${st[@]}"); fi
mpirun=(mpirun --oversubscribe --bind-to none)

echo "== collective self-test, 4 ranks"
"${mpirun[@]}" -np 4 "${st[@]}" selftest --dp-replicate 1 --dp-shard 2 --tp 2

# The train shard is written last: a preparation cut short is made again.
[ -f data/fortunes/bytes_train_000000.bin ] || python3 tools/prepare_bytes.py --out-dir data/fortunes
out=data/demo
rm -rf "$out"
mkdir -p "$out"
common=(--model tiny --data-train 'data/fortunes/bytes_train_*.bin'
        --data-val 'data/fortunes/bytes_val_*.bin' --steps 400 --micro-batch 8 --lr 3e-3
        --warmup 20 --min-lr 3e-4 --eval-every 100 --ckpt-dir "$out/ckpt" --ckpt-every 100
        --log-every 25)

echo "== training the tiny GPT: 4 ranks, tp 2 x dp-shard 2, ZeRO-3, bf16, checkpoints written in"
echo "   the background; this run stops at step 300"
"${mpirun[@]}" -np 4 "${st[@]}" train "${common[@]}" --tp 2 --dp-shard 2 --zero 3 \
  --param-dtype bf16 --reduce-dtype bf16 --stop-at 300 --ckpt-async --metrics "$out/first.jsonl" "$@"

echo "== resuming step 300 on 2 ranks: dp-shard 2, ZeRO-2, bf16 (the checkpoint reshards on load)"
"${mpirun[@]}" -np 2 "${st[@]}" train "${common[@]}" --dp-shard 2 --zero 2 \
  --param-dtype bf16 --reduce-dtype bf16 --resume --metrics "$out/resumed.jsonl" \
  --export "$out/model.safetensors" "$@"

echo "== the final checkpoint"
"${st[@]}" inspect "$out/ckpt/step_400"
python3 tools/plot_metrics.py "$out/first.jsonl" "$out/resumed.jsonl" \
  --labels "4 ranks tp2 x s2 ZeRO-3,resumed on 2 ranks s2 ZeRO-2" --out "$out/loss.png"

echo "== text the model writes (greedy, then sampled at temperature 0.8)"
# The tiny model has 64 positions: prompt and new tokens fill them.
"${st[@]}" sample --from "$out/ckpt/step_400" --prompt "The " --tokens 60 --temperature 0
"${st[@]}" sample --from "$out/model.safetensors" --prompt "Love is " --tokens 56 --temperature 0.8 \
  --top-k 40 --seed 7
cat <<DONE

written under $out:
  checkpoints  $out/ckpt/step_{100,200,300,400}   (shardtrain inspect / reshard / export)
  metrics      $out/first.jsonl, $out/resumed.jsonl
  loss plot    $out/loss.png
  HF export    $out/model.safetensors
DONE
