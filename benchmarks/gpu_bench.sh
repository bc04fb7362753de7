#!/usr/bin/env bash
# gpu_bench.sh - one GPU, one run: its ceilings, then shardtrain against PyTorch on GPT-2 d12-d48
# (docs/PERFORMANCE.md has the command, the columns and the results). Runs on the GPU machine from
# a bundle made by tools/gpu_bundle.sh (it needs that bundle's bin/shardtrain and bin/ceilings):
#   source gpu/env.sh && bash benchmarks/gpu_bench.sh [--quick] [--out DIR] [options]
#
#  1. ceilings: bin/ceilings's bf16 GEMM TFLOP/s and device-copy GB/s (a SKIP there means no
#     usable GPU: one line, exit 1);
#  2. for each size, at seq 1024 and 524,288 tokens per step (micro-batch x grad-accum), bf16:
#       shardtrain-zero0, shardtrain-zero3   `shardtrain train` at world 1 on random tokens
#                                            (benchmarks/random_tokens.py), params and reductions
#                                            in bf16; tokens/s and peak memory from --metrics
#       pytorch-compile, pytorch-fsdp2       benchmarks/peers/gpt2_torch.py (with --fsdp2)
#     each at the first micro-batch of the size's list that fits (shardtrain's planner refuses a
#     run that does not fit before allocating; PyTorch runs out of memory and exits 3), --warmup
#     untimed steps then --steps timed ones. A run that fails, times out or fits at no micro-batch
#     is a row that says so. shardtrain's grad-accum is at most 64, so it needs a micro-batch of
#     at least 8 (524,288 / 1024 / 64). shardtrain's attention kernels are the environment's
#     ST_CUDA_ATTENTION (docs/ENVIRONMENT.md); with one other than simple its rows are named
#     shardtrain-zeroK-<kind> (shardtrain-zero0-flash, shardtrain-zero0-cudnn), so the kinds can
#     sit in one table; a run whose log warns that another kind ran instead (no cuDNN library, a
#     shape cuDNN refused) is a failed row quoting the warning, never a mislabelled speed.
#  3. the table (benchmarks/bench_results.py: MFU = tokens/s x (6N + 6LCT) / 989 TFLOP/s) on
#     stdout and as CSV;
#  4. the kernel table (benchmarks/kernel_table.py): ncu profiles 2 steps of shardtrain d12 at
#     ZeRO-0 with grad-accum 1, plus one GEMM of `ceilings --gemm-once` to turn its tensor-core
#     counters into FLOPs; the last step's kernels against the ceilings. (Nsight Systems is not on
#     the GPU machine, and its timeline has no FLOP or byte counters anyway; ncu replays each
#     kernel alone, which bounds the profile to one small step.)
#
# Options:
#   --quick               d12 only (same as --sizes d12)
#   --sizes LIST          comma-separated of d12,d24,d36,d48 (default: all four)
#   --systems LIST        comma-separated of the four systems above (default: all four)
#   --micro-batches LIST  try these micro-batches, largest first, for every size (default: per
#                         size, below)
#   --warmup N, --steps N untimed and timed steps per run (default 1 and 3: 1.5M timed tokens)
#   --run-timeout S       seconds one run may take (default 480)
#   --no-kernels          skip the kernel table
#   --kernels-only        only the ceilings and the kernel table (no runs, no table)
#   --bundle DIR          the bundle (default gpu)
#   --out DIR             where the results go (default $OUT when set, else BUNDLE/bench):
#                         ceilings.txt, runs.jsonl, bench.csv, table.txt, kernels.csv, kernels.txt
#                         and logs.tar.xz (every run's log and metrics)
# The full benchmark takes longer than one 10-minute device command: split it with --sizes and
# merge the runs.jsonl files with `bench_results.py table A/runs.jsonl B/runs.jsonl --csv ...`.
# Exit status: 0 when the table was made (whatever its rows say), 1 without a usable GPU,
# 2 on a bad argument or a bundle without the binaries.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PROG=gpu_bench

die() { # die CODE MESSAGE: one line on stderr, then exit
  echo "$PROG: $2" >&2
  exit "$1"
}

# The micro-batches tried per size, largest first (--micro-batches replaces them).
declare -A MICRO_BATCHES=([d12]="32 16 8" [d24]="16 8 4" [d36]="16 8 4 2" [d48]="8 4 2 1")
ALL_SYSTEMS="shardtrain-zero0,shardtrain-zero3,pytorch-compile,pytorch-fsdp2"
SEQ=1024
BATCH_TOKENS=524288

sizes=d12,d24,d36,d48 systems=$ALL_SYSTEMS micro_batches="" warmup=1 steps=3
run_timeout=480 kernels=1 runs_wanted=1 bundle=gpu out=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) sizes=d12 ;;
    --no-kernels) kernels=0 ;;
    --kernels-only) runs_wanted=0 ;;
    --sizes | --systems | --micro-batches | --warmup | --steps | --run-timeout | --bundle | --out)
      [ $# -ge 2 ] || die 2 "$1 needs a value"
      case $1 in
        --sizes) sizes=$2 ;;
        --systems) systems=$2 ;;
        --micro-batches) micro_batches=${2//,/ } ;;
        --warmup) warmup=$2 ;;
        --steps) steps=$2 ;;
        --run-timeout) run_timeout=$2 ;;
        --bundle) bundle=$2 ;;
        --out) out=$2 ;;
      esac
      shift ;;
    *) die 2 "unknown argument '$1' (see the header of benchmarks/gpu_bench.sh)" ;;
  esac
  shift
done
for n in "$warmup" "$steps" "$run_timeout" $micro_batches; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die 2 "'$n' is not a positive integer"
done
for s in ${sizes//,/ }; do
  [ -n "${MICRO_BATCHES[$s]+x}" ] || die 2 "--sizes: '$s' is not one of d12, d24, d36, d48"
done
for s in ${systems//,/ }; do
  [[ ,$ALL_SYSTEMS, == *,$s,* ]] || die 2 "--systems: '$s' is not one of $ALL_SYSTEMS"
done

# The bundle: tools/gpu_bundle.sh ships bin/ and lib/ compressed; unpack on first use.
[ -d "$bundle" ] || die 2 "no bundle at '$bundle' (make one with tools/gpu_bundle.sh)"
if [ ! -d "$bundle/bin" ] && [ -f "$bundle/bundle.tar.xz" ]; then
  tar -xJf "$bundle/bundle.tar.xz" -C "$bundle" || die 2 "cannot unpack $bundle/bundle.tar.xz"
fi
st=$bundle/bin/shardtrain ceilings=$bundle/bin/ceilings
for b in "$ceilings" "$st"; do
  [ -x "$b" ] || die 2 "the bundle has no $b (rebuild it with tools/gpu_bundle.sh)"
done
out=${out:-${OUT:-$bundle/bench}}
mkdir -p "$out" || die 2 "cannot create --out $out"
work=$(mktemp -d /tmp/gpu_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
results=$here/benchmarks/bench_results.py

"$ceilings" > "$out/ceilings.txt" 2>&1
rc=$?
if grep -q '^SKIP' "$out/ceilings.txt"; then
  die 1 "no usable GPU: $(grep -m1 '^SKIP' "$out/ceilings.txt")"
fi
[ $rc -eq 0 ] || die 1 "ceilings failed: $(tail -1 "$out/ceilings.txt")"
echo "== ceilings"
cat "$out/ceilings.txt"

st_version="shardtrain $(cat "$bundle/version.txt" 2>/dev/null || echo unknown)"
attention=${ST_CUDA_ATTENTION:-simple}
# PyTorch runs with the library path from before the bundle's env.sh: env.sh puts the system's
# CUDA libraries first, and the libcudnn that PyTorch's wheel loads from its own package then
# finds its sub-libraries (loaded by name; checked: libcudnn_graph) there, the GPU machine's
# cuDNN 9.14 beside PyTorch's 9.19.
torch_env=(env -u LD_LIBRARY_PATH)
ld_path=${LD_LIBRARY_PATH:-}
ld_path=${ld_path#"$(cd "$bundle" && pwd)/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"}
ld_path=${ld_path#:}
[ -z "$ld_path" ] || torch_env=(env LD_LIBRARY_PATH="$ld_path")
torch_version=$("${torch_env[@]}" python3 -c 'import torch; print("torch", torch.__version__)' \
  2> /dev/null || echo "no torch")
python3 "$here/benchmarks/random_tokens.py" "$work/random_train.bin" > /dev/null ||
  die 1 "cannot write the random token shard"
runs=$work/runs.jsonl
: > "$runs"

# shardtrain_run SIZE ZERO MB NAME: one run; its exit status, 124 on timeout. Every core for the
# host's start-up work: the initial weights are drawn on the host at about 42 ns a value and
# thread, over a minute of d48's device time on one thread (env.sh's default is 4).
shardtrain_run() {
  local accum=$((BATCH_TOKENS / ($3 * SEQ)))
  OMP_NUM_THREADS=$(getconf _NPROCESSORS_ONLN) timeout "$run_timeout" mpirun -np 1 --bind-to none "$st" train --model "$1" --device cuda \
    --data-train "$work/random_train.bin" --seq-len "$SEQ" --micro-batch "$3" \
    --grad-accum "$accum" --steps $((warmup + steps)) --zero "$2" --param-dtype bf16 \
    --reduce-dtype bf16 --lr 6e-4 --quiet --metrics "$work/$4.jsonl" > "$work/$4.log" 2>&1
}

# torch_run SIZE FSDP2(0|1) MB NAME: one run; its exit status (3: out of memory), 124 on timeout.
torch_run() {
  local flag=()
  [ "$2" = 1 ] && flag=(--fsdp2)
  timeout "$run_timeout" "${torch_env[@]}" python3 "$here/benchmarks/peers/gpt2_torch.py" \
    --model "$1" --seq-len "$SEQ" --batch-tokens "$BATCH_TOKENS" --micro-batch "$3" \
    --warmup "$warmup" --steps "$steps" "${flag[@]}" > "$work/$4.log" 2>&1
}

# error_line LOG: what a failed run said: its first error line, else its last line of text.
error_line() {
  { grep -m1 -iE 'error' "$1" || grep -vE '^[[:space:]]*$|^-+$' "$1" | tail -1; } | cut -c1-200
}

# append_record: the `result {json}` line on stdin (bench_results.py's, gpt2_torch.py's) into runs.
append_record() {
  sed -n 's/^result //p' >> "$runs"
}

# measure SIZE SYSTEM: tries the micro-batches until one fits, appends the run's record.
measure() {
  local size=$1 system=$2 mb name rc note="" last_mb="" fields version=$torch_version
  local label=$system # the row's system
  if [[ $system == shardtrain-* ]]; then
    version=$st_version
    [ "$attention" = simple ] || label=$system-$attention
  fi
  for mb in ${micro_batches:-${MICRO_BATCHES[$size]}}; do
    name=${size}_${label}_mb$mb
    last_mb=$mb
    fields=(--system "$label" --model "$size" --seq-len "$SEQ" --micro-batch "$mb"
      --grad-accum $((BATCH_TOKENS / (mb * SEQ))) --version "$version")
    if [ $((BATCH_TOKENS % (mb * SEQ))) -ne 0 ]; then
      note="micro-batch $mb does not divide $BATCH_TOKENS tokens"
      continue
    fi
    case $system in
      shardtrain-zero*)
        if [ $((BATCH_TOKENS / (mb * SEQ))) -gt 64 ]; then
          note="${note:+$note; }micro-batch $mb needs grad-accum > 64"
          break
        fi
        shardtrain_run "$size" "${system#shardtrain-zero}" "$mb" "$name"
        rc=$?
        if [ $rc -eq 0 ] && grep -q "attention kernels run" "$work/$name.log"; then
          python3 "$results" record "${fields[@]}" --status failed \
            --note "$(grep -m1 "attention kernels run" "$work/$name.log")" | append_record
          return
        fi
        if [ $rc -eq 0 ]; then
          python3 "$results" shardtrain "$work/$name.jsonl" --warmup "$warmup" "${fields[@]}" |
            append_record
          return
        fi
        if [ $rc -ne 124 ] && grep -qE 'does not fit|out of [a-z]+ memory' "$work/$name.log"; then
          note="${note:+$note; }micro-batch $mb does not fit"
          continue
        fi ;;
      pytorch-*)
        torch_run "$size" "$([ "$system" = pytorch-fsdp2 ] && echo 1 || echo 0)" "$mb" "$name"
        rc=$?
        if [ $rc -eq 3 ]; then
          note="${note:+$note; }micro-batch $mb does not fit"
          continue
        fi
        if [ $rc -eq 0 ] || grep -q '^result ' "$work/$name.log"; then
          grep '^result ' "$work/$name.log" | tail -1 | append_record
          return
        fi ;;
    esac
    local status=failed
    [ $rc -eq 124 ] && status=timeout
    python3 "$results" record "${fields[@]}" --status "$status" \
      --note "exit $rc: $(error_line "$work/$name.log")" | append_record
    return
  done
  python3 "$results" record --system "$label" --model "$size" --seq-len "$SEQ" \
    ${last_mb:+--micro-batch "$last_mb"} --version "$version" --status "does not fit" \
    --note "$note" | append_record
}

if [ $runs_wanted = 1 ]; then
  for size in ${sizes//,/ }; do
    for system in ${systems//,/ }; do
      echo "== $size $system"
      measure "$size" "$system"
      tail -1 "$runs"
    done
  done
  cp "$runs" "$out/runs.jsonl"
  echo "== table"
  python3 "$results" table "$runs" --csv "$out/bench.csv" | tee "$out/table.txt"
fi

# The kernel table: what limits the step (see the header). Without the tensor-core counter (an ncu
# that does not know it), the table still has times and bytes, and no FLOP/s.
kernel_table() {
  local metrics mb flops calibration=()
  command -v ncu > /dev/null || { echo "no ncu on this machine"; return 1; }
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
  for op in ffma fadd fmul; do metrics+=,smsp__sass_thread_inst_executed_op_${op}_pred_on.sum; done
  local ncu=(ncu --csv --page raw --print-units base --clock-control none)
  if "${ncu[@]}" --metrics "$metrics,sm__ops_path_tensor_src_bf16_dst_fp32.sum" "$ceilings" \
    --gemm-once > "$work/ncu_gemm.csv" 2> "$work/ncu_gemm.err"; then
    metrics+=,sm__ops_path_tensor_src_bf16_dst_fp32.sum
    flops=$(sed -n 's/.*gemm_once .*flops=\([0-9]*\).*/\1/p' "$work/ncu_gemm.csv")
    calibration=(--calibration "$work/ncu_gemm.csv" --calibration-flops "$flops")
  else
    echo "ncu counted no tensor operations ($(tail -1 "$work/ncu_gemm.err")): no FLOP/s"
  fi
  mb=$(python3 -c 'import json,sys
for r in map(json.loads, open(sys.argv[1])):
    if r["model"] == "d12" and r["system"] == "shardtrain-zero0" and r["status"] == "ok":
        print(r["micro_batch"])' "$runs")
  mb=${mb:-16}
  timeout "$run_timeout" mpirun -np 1 --bind-to none "${ncu[@]}" --metrics "$metrics" \
    --launch-count 4000 "$st" train --model d12 --device cuda \
    --data-train "$work/random_train.bin" --seq-len "$SEQ" --micro-batch "$mb" --grad-accum 1 \
    --steps 2 --param-dtype bf16 --reduce-dtype bf16 --quiet \
    > "$work/ncu_step.csv" 2> "$work/ncu_step.err" ||
    { echo "ncu failed on the step: $(tail -1 "$work/ncu_step.err")"; return 1; }
  echo "shardtrain d12, ZeRO-0, $attention attention, micro-batch $mb x $SEQ, grad-accum 1" \
    "(once-per-step kernels such as AdamW weigh $((BATCH_TOKENS / (mb * SEQ))) times more here" \
    "than in a $BATCH_TOKENS-token step)"
  python3 "$here/benchmarks/kernel_table.py" "$work/ncu_step.csv" --ceilings "$out/ceilings.txt" \
    "${calibration[@]}" --csv "$out/kernels.csv"
}
if [ $kernels = 1 ]; then
  echo "== kernels"
  kernel_table 2>&1 | tee "$out/kernels.txt"
fi
tar -cJf "$out/logs.tar.xz" -C "$work" --exclude random_train.bin . 2> /dev/null
exit 0
