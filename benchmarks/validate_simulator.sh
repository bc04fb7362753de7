#!/usr/bin/env bash
# The simulator's validation tables (docs/SIMULATOR.md): predicted against measured step time.
#
# Measured rows: each configuration is trained on this machine and simulated with its hardware
# file; measured = the fastest step of steps 2..N (the first warms up) over --rounds runs of
# every configuration in turn (on a machine shared with other jobs the fastest is the least
# disturbed; `spread` is how much slower the slowest round's fastest step was), predicted =
# `shardtrain simulate` with the same flags on one node of as many devices as ranks.
#   cpu           M1 and M2 on 1-8 ranks with the MPI backend (OMP_NUM_THREADS=1), simulated
#                 with benchmarks/hardware/epyc_2core.hw
#   gpu-measured  on the GPU suite's machine (one GPU; tests/gpu/run_gpu_suite.sh calibrate), bf16:
#                 GPT-2 d12, d24 and d48 at world 1, d12 on 2, 4 and 8 ranks sharing the GPU
#                 (ZeRO-1 and ZeRO-3, NCCL's socket transport through LAUNCH_WRAPPER), simulated
#                 with the file benchmarks/hardware/measure_gpu.sh wrote there (--hardware)
# Simulated rows (gpu): `shardtrain simulate --gpu h100` against published llm.c step times on
# 8 x H100 and the llm.c world-1 throughput measured on this project's H100
# (docs/ENVIRONMENT.md). The built-in GPU rows are uncalibrated (engine/plan/sim_hw.c).
#
# Usage: benchmarks/validate_simulator.sh [--only cpu|gpu|gpu-measured] [--hardware FILE]
#          [--rows FILE] [--device cpu|cuda] [--steps N] [--rounds N]
#   --only         one table (default: cpu, then gpu)
#   --rows FILE    measured rows instead of the table's own, one per line:
#                  `name|ranks|model flags|mesh and precision flags` (`#` starts a comment);
#                  rows that name no dtype train and are simulated in fp32, train's default
#   --device       what the measured rows train on (default: cpu, or cuda for gpu-measured)
# Environment, for a GPU machine (a bundle from tools/gpu_bundle.sh, no Bazel there):
#   SHARDTRAIN=gpu/bin/shardtrain        the binary (default: built here with Bazel)
#   LAUNCH_WRAPPER=gpu/bin/nccl-hostid   run under mpirun before the binary
# Bad arguments: one line, exit 2.
set -euo pipefail
die() { echo "validate_simulator: $1" >&2; exit 2; }
hw=
rows_file=
device=
steps=8
rounds=3
only=all
flags="--only --hardware --rows --device --steps --rounds"
while [ $# -gt 0 ]; do
  [[ " $flags " == *" $1 "* ]] || die "unknown flag '$1' (flags: $flags)"
  [ $# -ge 2 ] || die "$1 needs a value"
  case $1 in
    --hardware) hw=$(realpath -m "$2") ;;
    --rows) rows_file=$(realpath -m "$2") ;;
    --device) device=$2 ;;
    --steps) steps=$2 ;;
    --rounds) rounds=$2 ;;
    --only) only=$2 ;;
  esac
  shift 2
done
case $only in all | cpu | gpu | gpu-measured) ;; *) die "--only '$only' is not cpu, gpu or gpu-measured" ;; esac
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 2 ] || die "--steps '$steps' is not a whole number >= 2"
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] || die "--rounds '$rounds' is not a whole number >= 1"
[ -z "$rows_file" ] || [ -f "$rows_file" ] || die "--rows $rows_file: no such file"
if [ "$only" = gpu-measured ]; then
  [ -n "$hw" ] || die "--only gpu-measured needs --hardware (the file measure_gpu.sh wrote)"
  device=${device:-cuda}
fi
device=${device:-cpu}
case $device in cpu | cuda) ;; *) die "--device '$device' is not cpu or cuda" ;; esac
[ -z "$hw" ] || [ -f "$hw" ] || die "--hardware $hw: no such file"
st=${SHARDTRAIN:+$(realpath -m "$SHARDTRAIN")}
cd "$(dirname "$0")/.."
hw=${hw:-benchmarks/hardware/epyc_2core.hw}
if [ -z "$st" ]; then
  # shellcheck source=benchmarks/build_cli.sh
  . benchmarks/build_cli.sh
  build_cli validate_simulator || exit 1
  st=bazel-bin/engine/cli/shardtrain
fi
work=$(mktemp -d /tmp/st-validate.XXXXXX)
trap 'rm -rf "$work"' EXIT
# One thread a rank: the CPU rows are calibrated per core. On the GPU only the host's start-up
# work is threaded (drawing the initial weights: over a minute for d48 on one thread), so the
# cuda rows share the cores among their ranks (train_threads).
export OMP_NUM_THREADS=1
train_threads() { # RANKS: OMP_NUM_THREADS for a measured row
  if [ "$device" = cuda ]; then echo $((($(getconf _NPROCESSORS_ONLN) + $1 - 1) / $1)); else echo 1; fi
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# predicted_ms FLAGS...: the simulator's step time in ms.
predicted_ms() {
  "$st" simulate "$@" --csv "$work/sim.csv" >/dev/null
  python3 -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1]))); print("%.1f" % (1e3*float(r[0]["step_s"])))' "$work/sim.csv"
}

row() { # name ranks measured predicted [note]
  python3 -c 'import sys; n,r,m,p=sys.argv[1:5]; m,p=float(m),float(p); print("| %s | %s | %.1f | %.1f | %+.1f%% |%s" % (n, r, m, p, 100*(p-m)/m, (" " + sys.argv[5] + " |") if len(sys.argv) > 5 else ""))' "$@"
}

# The CPU rows: two models on 256-byte tokens, M1 spending its step computing, M2 (wide,
# shallow, one 64-token sequence per rank) moving 25 MB of fp32 gradients and parameters.
cpu_rows() {
  local m1="--model tiny --n-layer 4 --n-embd 256 --n-head 4 --seq-len 256 --micro-batch 4"
  local m2="--model tiny --n-layer 2 --n-embd 512 --n-head 8 --seq-len 64 --micro-batch 1"
  printf '%s\n' \
    "M1 1x1x1 zero0|1|$m1|--zero 0" \
    "M1 1x2x1 zero0|2|$m1|--zero 0" \
    "M1 1x2x1 zero3|2|$m1|--zero 3" \
    "M1 1x1x2 zero0 (tp 2)|2|$m1|--zero 0 --tp 2" \
    "M1 1x4x1 zero1|4|$m1|--zero 1" \
    "M1 1x4x1 zero2|4|$m1|--zero 2" \
    "M1 2x2x1 zero3 (hybrid)|4|$m1|--zero 3 --dp-replicate 2" \
    "M1 1x2x2 zero3 (tp 2)|4|$m1|--zero 3 --tp 2" \
    "M1 1x4x1 zero3 bf16|4|$m1|--zero 3 --param-dtype bf16 --reduce-dtype bf16" \
    "M1 1x8x1 zero3|8|$m1|--zero 3" \
    "M1 2x2x2 zero3 (hybrid, tp 2)|8|$m1|--zero 3 --dp-replicate 2 --tp 2" \
    "M1 1x2x1 zero3 accum 2, prefetch 2|2|$m1|--zero 3 --grad-accum 2 --prefetch 2" \
    "M2 1x1x1 zero0|1|$m2|--zero 0" \
    "M2 1x2x1 zero0|2|$m2|--zero 0" \
    "M2 1x2x1 zero3|2|$m2|--zero 3" \
    "M2 1x4x1 zero1|4|$m2|--zero 1" \
    "M2 1x4x1 zero3|4|$m2|--zero 3" \
    "M2 2x2x1 zero2 (hybrid)|4|$m2|--zero 2 --dp-replicate 2" \
    "M2 1x8x1 zero3|8|$m2|--zero 3"
}

# The GPU rows (one GPU, byte tokens, seq 1024, bf16): a few seconds of steps each. World 1
# at three sizes; d12 on 2, 4 and 8 ranks taking turns on the GPU, whose steps are NCCL's
# socket transport moving 250 MB of bf16 gradients and parameters (ZeRO-1) or 375 MB (ZeRO-3).
gpu_rows() {
  local bf16="--param-dtype bf16 --reduce-dtype bf16" n
  printf '%s\n' \
    "d12 1x1x1 zero0 bf16|1|--model d12 --micro-batch 8|--zero 0 $bf16" \
    "d24 1x1x1 zero0 bf16|1|--model d24 --micro-batch 8|--zero 0 $bf16" \
    "d48 1x1x1 zero0 bf16|1|--model d48 --micro-batch 4|--zero 0 $bf16"
  for n in 2 4 8; do
    printf '%s\n' "d12 1x${n}x1 zero1 bf16 (shared GPU)|$n|--model d12 --micro-batch 4|--zero 1 $bf16" \
      "d12 1x${n}x1 zero3 bf16 (shared GPU)|$n|--model d12 --micro-batch 4|--zero 3 $bf16"
  done
}

# measured_table ROWS_FUNCTION: trains the rows (--rows FILE's instead, where given) and prints
# the table of measured against predicted step times.
measured_table() {
  local rows=() round c name ranks model mesh ms dtypes predicted spread machine
  if [ -n "$rows_file" ]; then
    mapfile -t rows < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$rows_file")
  else
    mapfile -t rows < <("$1")
  fi
  python3 tools/prepare_bytes.py --out-dir "$work/data" >/dev/null
  if [ "$device" = cuda ]; then
    machine="GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  else
    machine="CPU: $(getconf _NPROCESSORS_ONLN) cores"
  fi
  echo "$machine, hardware file $hw, fastest of steps 2..$steps in $rounds rounds; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  declare -A best worst
  for round in $(seq "$rounds"); do
    for c in "${rows[@]}"; do
      IFS='|' read -r name ranks model mesh <<<"$c"
      rm -f "$work/m.jsonl"
      # shellcheck disable=SC2086  # the wrapper, model and mesh are lists of words
      OMP_NUM_THREADS=$(train_threads "$ranks") tests/mpirun.sh "$ranks" ${LAUNCH_WRAPPER:-} "$st" train --device "$device" $model $mesh \
        --data-train "$work/data/bytes_train_*.bin" --steps "$steps" --metrics "$work/m.jsonl" \
        >"$work/train.log" 2>&1 || { echo "train failed: $name"; cat "$work/train.log"; exit 1; }
      ms=$(python3 -c 'import json,sys; print(min(json.loads(l)["step_ms"] for l in list(open(sys.argv[1]))[1:]))' "$work/m.jsonl")
      best[$name]=$(python3 -c 'import sys; print(min(float(x) for x in sys.argv[1:] if x))' "$ms" "${best[$name]:-}")
      worst[$name]=$(python3 -c 'import sys; print(max(float(x) for x in sys.argv[1:] if x))' "$ms" "${worst[$name]:-}")
    done
    echo "round $round done, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  done
  echo
  echo "| configuration (model, R x S x T, stage) | ranks | measured ms | predicted ms | error | spread |"
  echo "|---|---|---|---|---|---|"
  for c in "${rows[@]}"; do
    IFS='|' read -r name ranks model mesh <<<"$c"
    dtypes="--param-dtype fp32 --reduce-dtype fp32"
    case $mesh in *dtype*) dtypes= ;; esac
    # shellcheck disable=SC2086
    predicted=$(predicted_ms --hardware "$hw" --gpus-per-node "$ranks" --nodes 1 $model $mesh $dtypes)
    spread=$(python3 -c 'import sys; print("%.0f%%" % (100 * (float(sys.argv[2]) / float(sys.argv[1]) - 1)))' "${best[$name]}" "${worst[$name]}")
    row "$name" "$ranks" "${best[$name]}" "$predicted" "$spread"
  done
  echo
}

case $only in
  all | cpu) measured_table cpu_rows ;;
  gpu-measured) measured_table gpu_rows ;;
esac

if [ "$only" = all ] || [ "$only" = gpu ]; then
  echo "GPU (built-in h100 row: datasheet peaks x measured GEMM/copy ceilings, uncalibrated):"
  echo
  echo "| configuration | GPUs | measured ms | predicted ms | error | source of the measurement |"
  echo "|---|---|---|---|---|---|"
  p=$(predicted_ms --gpu h100 --model d12 --zero 1 --micro-batch 64 --grad-accum 1)
  row "llm.c GPT-2 124M, ZeRO-1, 524,288 tokens/step, bf16" 8 140 "$p" "llm.c, published"
  p=$(predicted_ms --gpu h100 --model d48 --zero 1 --micro-batch 16 --grad-accum 8)
  row "llm.c GPT-2 1.5B, ZeRO-1, 1,048,576 tokens/step, bf16" 8 2800 "$p" "llm.c, published"
  # 524,288 tokens at about 445k tokens/s (docs/ENVIRONMENT.md): 1178 ms per step.
  p=$(predicted_ms --gpu h100 --gpus-per-node 1 --model d12 --zero 0 --micro-batch 64 --grad-accum 8)
  row "llm.c GPT-2 124M, 1 GPU, 524,288 tokens/step, bf16" 1 1178 "$p" "docs/ENVIRONMENT.md, ~445k tok/s"
  echo "| shardtrain on 1 x H100, every model size (GPU calibration) | 1 | pending | | | --only gpu-measured on the GPU machine |"
  echo
  # What one calibration point would do (an illustration, not the shipped default): every
  # kernel efficiency scaled by one factor so that the world-1 row above is reproduced; the
  # 8-GPU rows then test only what the simulator adds: scaling, communication, the schedule.
  scale=$(python3 -c 'import sys; print("%.4f" % (float(sys.argv[1]) / 1178))' "$p")
  echo "Illustration: every kernel efficiency x $scale (--efficiency-scale), fitted to the world-1 row:"
  echo
  echo "| configuration | GPUs | measured ms | predicted ms | error |"
  echo "|---|---|---|---|---|"
  p=$(predicted_ms --gpu h100 --efficiency-scale "$scale" --model d12 --zero 1 --micro-batch 64 --grad-accum 1)
  row "llm.c GPT-2 124M, ZeRO-1" 8 140 "$p"
  p=$(predicted_ms --gpu h100 --efficiency-scale "$scale" --model d48 --zero 1 --micro-batch 16 --grad-accum 8)
  row "llm.c GPT-2 1.5B, ZeRO-1" 8 2800 "$p"
fi
