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
#     ST_CUDA_ATTENTION (docs/ENVIRONMENT.md); with one other than cudnn, the default, its rows
#     are named shardtrain-zeroK-<kind> (shardtrain-zero0-flash, shardtrain-zero0-simple), so the
#     kinds can sit in one table; a run whose log says that another kind ran instead (no cuDNN
#     library, a shape cuDNN refused) is a failed row quoting that line, never a mislabelled
#     speed.
#  3. the table (benchmarks/bench_results.py: MFU = tokens/s x (6N + 6LCT) / 989 TFLOP/s) on
#     stdout and as CSV;
#  4. the kernel table (benchmarks/kernel_table.py): ncu profiles 2 steps of shardtrain d12 at
#     ZeRO-0 with grad-accum 1 (at the micro-batch of this call's d12 shardtrain-zero0 row; not
#     at all when that row failed, timed out or was skipped), plus one GEMM of `ceilings
#     --gemm-once` to turn its tensor-core counters into FLOPs; the last step's kernels against
#     the ceilings. (Nsight Systems is not on the GPU machine, and its timeline has no FLOP or
#     byte counters anyway; ncu replays each kernel alone, which bounds the profile to one small
#     step.)
# Time: the whole call ends within --budget seconds of its start (BENCH_BUDGET, default 560: a
# device command of 600 s with 40 to spare), so that the device tool never kills it. Each step
# (the ceilings 120 s, each run --run-timeout, each ncu) is given its own limit or what is left
# of the budget, whichever is less, with 25 s kept back for timeout's KILL grace (10 s) and the
# end (15 s); a run that would start with less than --min-run seconds is not started but is a
# row with the status "skipped" (note "budget: ..."). Each step runs under `timeout -k` in a
# process session of its own, and whatever of that session is left when it ends is killed: Open
# MPI puts each rank in a process group of its own, out of reach of timeout's signals, so a rank
# whose mpirun was killed would run on holding the GPU. A TERM or INT ends the step in flight the
# same way, records its run as failed, packs the logs and exits.
# Results are written as they come, so a call killed all the same keeps every finished run:
# runs.jsonl gains each run's record as it ends, logs.tar.xz is rewritten after each step, and
# bench.csv, table.txt and the kernel table's files are written at the end.
#
# Options:
#   --quick               d12 only (same as --sizes d12)
#   --sizes LIST          comma-separated of d12,d24,d36,d48 (default: all four)
#   --systems LIST        comma-separated of the four systems above (default: all four)
#   --micro-batches LIST  try these micro-batches, largest first, for every size (default: per
#                         size, below)
#   --warmup N, --steps N untimed and timed steps per run (default 1 and 3: 1.5M timed tokens)
#   --run-timeout S       seconds one run may take (default 480)
#   --budget S            seconds the whole call may take (default $BENCH_BUDGET, else 560; at
#                         least 30)
#   --min-run S           the least time a run (or an ncu) is started with (default 60, or its
#                         own limit where that is less)
#   --no-kernels          skip the kernel table
#   --kernels-only        only the ceilings and the kernel table (no runs, no table)
#   --bundle DIR          the bundle (default gpu)
#   --out DIR             where the results go (default $OUT when set, else BUNDLE/bench):
#                         ceilings.txt, runs.jsonl, bench.csv, table.txt, kernels.csv, kernels.txt
#                         and logs.tar.xz (every run's log and metrics): 7 files, under the
#                         device tool's 8 (so the logs are one archive, not a folder of files)
# The full benchmark takes longer than one 10-minute device command: split it with --sizes and
# merge the runs.jsonl files with `bench_results.py table A/runs.jsonl B/runs.jsonl --csv ...`.
# Exit status: 0 when the table was made (whatever its rows say), 1 without a usable GPU (or
# ceilings that failed or timed out), 2 on a bad argument or a bundle without the binaries, 3
# when the table could not be made or a run left no record, 128 + N when stopped by signal N.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PROG=gpu_bench
SECONDS=0 # the budget counts from here

die() { # die CODE MESSAGE: one line on stderr, then exit
  echo "$PROG: $2" >&2
  exit "$1"
}

# The micro-batches tried per size, largest first (--micro-batches replaces them).
declare -A MICRO_BATCHES=([d12]="32 16 8" [d24]="16 8 4" [d36]="16 8 4 2" [d48]="8 4 2 1")
ALL_SYSTEMS="shardtrain-zero0,shardtrain-zero3,pytorch-compile,pytorch-fsdp2"
SEQ=1024
BATCH_TOKENS=524288
KILL_AFTER=10     # timeout -k: a step that ignores TERM gets KILL this much later
END_RESERVE=15    # kept back from the steps for the end: the table and the logs' archive
CEILINGS_LIMIT=120

sizes=d12,d24,d36,d48 systems=$ALL_SYSTEMS micro_batches="" warmup=1 steps=3
run_timeout=480 kernels=1 runs_wanted=1 bundle=gpu out="" budget=${BENCH_BUDGET:-560} min_run=60
while [ $# -gt 0 ]; do
  case $1 in
    --quick) sizes=d12 ;;
    --no-kernels) kernels=0 ;;
    --kernels-only) runs_wanted=0 ;;
    --sizes | --systems | --micro-batches | --warmup | --steps | --run-timeout | --budget | \
      --min-run | --bundle | --out)
      [ $# -ge 2 ] || die 2 "$1 needs a value"
      case $1 in
        --sizes) sizes=$2 ;;
        --systems) systems=$2 ;;
        --micro-batches) micro_batches=${2//,/ } ;;
        --warmup) warmup=$2 ;;
        --steps) steps=$2 ;;
        --run-timeout) run_timeout=$2 ;;
        --budget) budget=$2 ;;
        --min-run) min_run=$2 ;;
        --bundle) bundle=$2 ;;
        --out) out=$2 ;;
      esac
      shift ;;
    *) die 2 "unknown argument '$1' (see the header of benchmarks/gpu_bench.sh)" ;;
  esac
  shift
done
for n in "$warmup" "$steps" "$run_timeout" "$budget" "$min_run" $micro_batches; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die 2 "'$n' is not a positive integer"
done
[ "$budget" -ge $((KILL_AFTER + END_RESERVE + 5)) ] ||
  die 2 "--budget $budget leaves no time for a step: at least $((KILL_AFTER + END_RESERVE + 5))"
for s in ${sizes//,/ }; do
  [ -n "${MICRO_BATCHES[$s]+x}" ] || die 2 "--sizes: '$s' is not one of d12, d24, d36, d48"
done
for s in ${systems//,/ }; do
  [[ ,$ALL_SYSTEMS, == *,$s,* ]] || die 2 "--systems: '$s' is not one of $ALL_SYSTEMS"
done
deadline=$budget # in SECONDS, which count from the start

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
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_bench.XXXXXX") || die 2 "cannot make a work folder"
exec 3>&1 4>&2 # stdout and stderr as given, for what the steps' redirections must not take
results=$here/benchmarks/bench_results.py

# ---- steps under the budget ------------------------------------------------------------------

# allowance LIMIT: LIMIT seconds, or what the budget leaves a step (after the KILL grace and the
# end's reserve) where that is less; 0 or less when nothing is left.
allowance() {
  local left=$((deadline - SECONDS - KILL_AFTER - END_RESERVE))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}

# too_short SECS LIMIT: SECS (an allowance) is too short to start a step whose own limit is
# LIMIT: under --min-run, or under LIMIT where that is less.
too_short() {
  [ "$1" -lt "$min_run" ] && [ "$1" -lt "$2" ]
}

# shellcheck source=benchmarks/bounded_steps.sh
. "$here/benchmarks/bounded_steps.sh"
step=       # the step in flight's name,
inflight=() # and its run's record fields, for a failed record if a signal stops it

# pack_logs: every step's log and metrics so far (not the token shard) into $out/logs.tar.xz,
# replaced whole (a part written beside it, then renamed), so a call killed later keeps them.
pack_logs() {
  timeout -k 2 15 tar -cJf "$out/logs.tar.xz.part" -C "$work" --exclude random_train.bin \
    --exclude './.*' . 2> "$work/.tar_err" &&
    mv -f "$out/logs.tar.xz.part" "$out/logs.tar.xz" ||
    echo "$PROG: could not pack the logs: $(tail -1 "$work/.tar_err")" >&2
}

# ---- records ---------------------------------------------------------------------------------

runs=$work/runs.jsonl # with runs, $out/runs.jsonl (below)
lost=0                # runs that left no record: exit 3

# append TEXT: the last `result {json}` line of TEXT (bench_results.py's, gpt2_torch.py's), if it
# holds a JSON object, onto runs and stdout; 1 (and nothing appended) otherwise.
append() {
  local line
  line=$(grep '^result ' <<< "$1" | tail -1)
  line=${line#result }
  [ -n "$line" ] && python3 -c 'import json, sys
assert isinstance(json.loads(sys.argv[1]), dict)' "$line" 2> "$work/.append_err" || return 1
  printf '%s\n' "$line" >> "$runs"
  printf '%s\n' "$line"
}

# record FIELDS... --status S --note N: a record of a run without a measurement (bench_results.py
# record) appended; a failure to make one is said, and counted as a run without a record.
record() {
  local text
  text=$(python3 "$results" record "$@" 2>&1)
  append "$text" && return
  echo "$PROG: no record: bench_results.py record: $text" >&2
  lost=$((lost + 1))
}

# error_line LOG: what a failed run said: its first error line, else its last line of text.
error_line() {
  { grep -m1 -iE 'error' "$1" || grep -vE '^[[:space:]]*$|^-+$' "$1" | tail -1; } | cut -c1-200
}

# why RC SECS: a cut run's words: timed out at --run-timeout, or cut earlier by the budget.
why() {
  if [ "$2" -lt "$run_timeout" ]; then
    echo "exit $1: cut after $2 s by --budget $budget (--run-timeout $run_timeout)"
  else
    echo "exit $1: timed out after $2 s (--run-timeout)"
  fi
}

# stop SIG: a TERM or INT: the step in flight ended (TERM to its process group, KILL to what is
# left of its session 3 s later), its run recorded as failed, the logs packed; exit 128 + N.
stop() {
  trap '' TERM INT
  exec >&3 2>&4 # not into the step's log, where a signal during its wait would put this
  local code=130 i
  [ "$1" = INT ] || code=143
  echo "$PROG: stopped by SIG$1 after $SECONDS s${child:+, during $step}" >&2
  if [ -n "$child" ]; then
    kill -s TERM -- "-$child" 2>> "$work/.proc_err" || kill -s TERM "$child" 2>> "$work/.proc_err"
    for ((i = 0; i < 30; i++)); do
      gone "$child" && break
      sleep 0.1
    done
    [ -z "$has_setsid" ] || sweep_session "$child"
    kill -s KILL -- "-$child" 2>> "$work/.proc_err"
  fi
  [ "${#inflight[@]}" -eq 0 ] ||
    record "${inflight[@]}" --status failed --note "stopped by SIG$1 after $SECONDS s"
  pack_logs
  exit "$code"
}
trap 'rm -rf "$work"' EXIT
trap 'stop TERM' TERM
trap 'stop INT' INT

# ---- the ceilings ----------------------------------------------------------------------------

secs=$(allowance "$CEILINGS_LIMIT")
[ "$secs" -ge 1 ] || die 1 "no time left for the ceilings: $SECONDS s of --budget $budget spent"
step=ceilings
bounded "$secs" "$ceilings" > "$out/ceilings.txt" 2>&1
rc=$?
if grep -q '^SKIP' "$out/ceilings.txt"; then
  die 1 "no usable GPU: $(grep -m1 '^SKIP' "$out/ceilings.txt")"
fi
case $rc in
  0) ;;
  124 | 137) die 1 "ceilings timed out after $secs s (exit $rc)" ;;
  *) die 1 "ceilings failed: $(tail -1 "$out/ceilings.txt")" ;;
esac
echo "== ceilings"
cat "$out/ceilings.txt"

st_version="shardtrain unknown"
[ ! -f "$bundle/version.txt" ] || st_version="shardtrain $(cat "$bundle/version.txt")"
attention=${ST_CUDA_ATTENTION:-cudnn}
zero0_label=shardtrain-zero0 # the d12 row the kernel table profiles
[ "$attention" = cudnn ] || zero0_label=shardtrain-zero0-$attention
# PyTorch runs with the library path from before the bundle's env.sh: env.sh puts the system's
# CUDA libraries first, and the libcudnn that PyTorch's wheel loads from its own package then
# finds its sub-libraries (loaded by name; checked: libcudnn_graph) there, the GPU machine's
# cuDNN 9.14 beside PyTorch's 9.19. env.sh (../shared/tools/gpu-bundle's, as tools/gpu_bundle.sh
# rewrites it) sets BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:
# /usr/lib/x86_64-linux-gnu, so the path before it is what lies between that prefix and that
# suffix (nothing: it was empty or unset). A path not of that form is passed on as it is.
torch_env=(env -u LD_LIBRARY_PATH)
ld_path=${LD_LIBRARY_PATH:-}
env_prefix="$(cd "$bundle" && pwd)/lib:/usr/local/cuda/lib64"
env_suffix=:/usr/lib/x86_64-linux-gnu
if [[ $ld_path == "$env_prefix"*"$env_suffix" ]]; then
  middle=${ld_path#"$env_prefix"}
  middle=${middle%"$env_suffix"}
  case $middle in
    '') ld_path= ;;
    :*) ld_path=${middle#:} ;;
  esac
fi
[ -z "$ld_path" ] || torch_env=(env LD_LIBRARY_PATH="$ld_path")
torch_version="no torch"
if [ $runs_wanted = 1 ] && [[ ,$systems, == *,pytorch-* ]]; then
  step="import torch"
  torch_version=$(bounded "$(allowance 60)" "${torch_env[@]}" python3 -c \
    'import torch; print("torch", torch.__version__)' 2> "$work/torch_version.err") ||
    torch_version="no torch"
fi
# shardtrain's data (its runs and the kernel table's; the PyTorch peer draws its own).
if { [ $runs_wanted = 1 ] && [[ ,$systems, == *,shardtrain-* ]]; } || [ $kernels = 1 ]; then
  step="random_tokens.py"
  bounded "$(allowance 120)" python3 "$here/benchmarks/random_tokens.py" \
    "$work/random_train.bin" > "$work/random_tokens.log" 2>&1 ||
    die 1 "cannot write the random token shard: $(tail -1 "$work/random_tokens.log")"
fi

# ---- the runs --------------------------------------------------------------------------------

# shardtrain_run SECS SIZE ZERO MB NAME: one run, bounded; its exit status, 124 or 137 when cut.
# Every core for the host's start-up work: the initial weights are drawn on the host at about
# 42 ns a value and thread, over a minute of d48's device time on one thread (env.sh's default
# is 4).
shardtrain_run() {
  local accum=$((BATCH_TOKENS / ($4 * SEQ)))
  step=$5
  bounded "$1" env OMP_NUM_THREADS="$(getconf _NPROCESSORS_ONLN)" mpirun -np 1 --bind-to none \
    "$st" train --model "$2" --device cuda --data-train "$work/random_train.bin" \
    --seq-len "$SEQ" --micro-batch "$4" --grad-accum "$accum" --steps $((warmup + steps)) \
    --zero "$3" --param-dtype bf16 --reduce-dtype bf16 --lr 6e-4 --quiet \
    --metrics "$work/$5.jsonl" > "$work/$5.log" 2>&1
}

# torch_run SECS SIZE FSDP2(0|1) MB NAME: one run, bounded; its exit status (3: out of memory),
# 124 or 137 when cut.
torch_run() {
  local flag=()
  [ "$3" = 1 ] && flag=(--fsdp2)
  step=$5
  bounded "$1" "${torch_env[@]}" python3 "$here/benchmarks/peers/gpt2_torch.py" \
    --model "$2" --seq-len "$SEQ" --batch-tokens "$BATCH_TOKENS" --micro-batch "$4" \
    --warmup "$warmup" --steps "$steps" "${flag[@]}" > "$work/$5.log" 2>&1
}

# measure SIZE SYSTEM: tries the micro-batches until one fits, appends the run's record (one
# record whatever happens: a measurement, a failure, "does not fit", "skipped").
measure() {
  local size=$1 system=$2 mb name rc note="" last_mb="" fields version=$torch_version secs text
  local label=$system # the row's system
  if [[ $system == shardtrain-* ]]; then
    version=$st_version
    [ "$attention" = cudnn ] || label=$system-$attention
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
    if [[ $system == shardtrain-zero* ]] && [ $((BATCH_TOKENS / (mb * SEQ))) -gt 64 ]; then
      note="${note:+$note; }micro-batch $mb needs grad-accum > 64"
      break
    fi
    secs=$(allowance "$run_timeout")
    if too_short "$secs" "$run_timeout"; then
      local left=$((secs > 0 ? secs : 0))
      note="budget: $left s left (--budget $budget, --min-run $min_run)${note:+; $note}"
      record "${fields[@]}" --status skipped --note "$note"
      return
    fi
    inflight=("${fields[@]}")
    case $system in
      shardtrain-zero*)
        shardtrain_run "$secs" "$size" "${system#shardtrain-zero}" "$mb" "$name"
        rc=$?
        inflight=()
        pack_logs
        if [ $rc -eq 0 ] && grep -q "attention kernels run" "$work/$name.log"; then
          record "${fields[@]}" --status failed \
            --note "$(grep -m1 "attention kernels run" "$work/$name.log")"
          return
        fi
        if [ $rc -eq 0 ]; then
          text=$(python3 "$results" shardtrain "$work/$name.jsonl" --warmup "$warmup" \
            "${fields[@]}" 2>&1)
          append "$text" || record "${fields[@]}" --status failed \
            --note "exit 0, but no record of its metrics: $(tail -1 <<< "$text" | cut -c1-200)"
          return
        fi
        if [ $rc -ne 124 ] && [ $rc -ne 137 ] &&
          grep -qE 'does not fit|out of [a-z]+ memory' "$work/$name.log"; then
          note="${note:+$note; }micro-batch $mb does not fit"
          continue
        fi ;;
      pytorch-*)
        torch_run "$secs" "$size" "$([ "$system" = pytorch-fsdp2 ] && echo 1 || echo 0)" "$mb" \
          "$name"
        rc=$?
        inflight=()
        pack_logs
        if [ $rc -eq 3 ]; then
          note="${note:+$note; }micro-batch $mb does not fit"
          continue
        fi
        if { [ $rc -eq 0 ] || grep -q '^result ' "$work/$name.log"; } &&
          append "$(cat "$work/$name.log")"; then
          return
        fi ;;
    esac
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      record "${fields[@]}" --status timeout \
        --note "$(why "$rc" "$secs"): $(error_line "$work/$name.log")"
    else
      record "${fields[@]}" --status failed --note "exit $rc: $(error_line "$work/$name.log")"
    fi
    return
  done
  record --system "$label" --model "$size" --seq-len "$SEQ" ${last_mb:+--micro-batch "$last_mb"} \
    --version "$version" --status "does not fit" --note "$note"
}

status=0
if [ $runs_wanted = 1 ]; then
  runs=$out/runs.jsonl # each record lands there as its run ends
  : > "$runs"
  for size in ${sizes//,/ }; do
    for system in ${systems//,/ }; do
      echo "== $size $system ($SECONDS s of --budget $budget)"
      measure "$size" "$system"
    done
  done
  [ "$lost" -eq 0 ] || { echo "$PROG: $lost run(s) left no record" >&2; status=3; }
  echo "== table"
  if ! timeout -k 2 10 python3 "$results" table "$runs" --csv "$out/bench.csv" |
    tee "$out/table.txt"; then
    echo "$PROG: bench_results.py table failed (above): no table; runs.jsonl has the records" >&2
    status=3
  fi
fi

# ---- the kernel table ------------------------------------------------------------------------

# The kernel table: what limits the step (see the header). Without the tensor-core counter (an ncu
# that does not know it), the table still has times and bytes, and no FLOP/s.
kernel_table() {
  local metrics mb="" flops calibration=() row secs rc
  # The micro-batch of this call's d12 row of shardtrain-zero0 (with the attention's suffix);
  # a row that is not ok says the profile would fail, or run out its time, the same way.
  if [ $runs_wanted = 1 ]; then
    row=$(python3 -c 'import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1]))
        if r.get("model") == "d12" and r.get("system") == sys.argv[2]]
if rows:
    r = rows[-1]
    print(r.get("status"), r.get("micro_batch") or "", str(r.get("note") or "")[:160], sep="\t")
' "$runs" "$zero0_label") || row=""
    if [ -n "$row" ]; then
      IFS=$'\t' read -r row_status mb row_note <<< "$row"
      if [ "$row_status" != ok ]; then
        echo "kernel table: skipped: the d12 $zero0_label row is '$row_status' ($row_note)," \
          "and its profile would fare the same"
        return 0
      fi
    fi
  fi
  if [ -z "$mb" ]; then
    mb=${micro_batches%% *}
    mb=${mb:-16}
    echo "no d12 $zero0_label row in this call: the profile runs at micro-batch $mb"
  fi
  [ -n "$(command -v ncu)" ] || { echo "no ncu on this machine"; return 1; }
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
  for op in ffma fadd fmul; do metrics+=,smsp__sass_thread_inst_executed_op_${op}_pred_on.sum; done
  local ncu=(ncu --csv --page raw --print-units base --clock-control none)
  secs=$(allowance "$CEILINGS_LIMIT")
  if too_short "$secs" "$CEILINGS_LIMIT"; then
    echo "kernel table: skipped: budget: $((secs > 0 ? secs : 0)) s left of --budget $budget," \
      "under --min-run $min_run"
    return 0
  fi
  step="ncu of the calibration GEMM"
  bounded "$secs" "${ncu[@]}" --metrics "$metrics,sm__ops_path_tensor_src_bf16_dst_fp32.sum" \
    "$ceilings" --gemm-once > "$work/ncu_gemm.csv" 2> "$work/ncu_gemm.err"
  rc=$?
  pack_logs
  if [ $rc -eq 0 ]; then
    metrics+=,sm__ops_path_tensor_src_bf16_dst_fp32.sum
    flops=$(sed -n 's/.*gemm_once .*flops=\([0-9]*\).*/\1/p' "$work/ncu_gemm.csv")
    calibration=(--calibration "$work/ncu_gemm.csv" --calibration-flops "$flops")
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "ncu on the calibration GEMM: exit $rc, cut after $secs s: no FLOP/s"
  else
    echo "ncu counted no tensor operations ($(tail -1 "$work/ncu_gemm.err")): no FLOP/s"
  fi
  secs=$(allowance "$run_timeout")
  if too_short "$secs" "$run_timeout"; then
    echo "kernel table: skipped: budget: $((secs > 0 ? secs : 0)) s left of --budget $budget" \
      "for the profile, under --min-run $min_run"
    return 0
  fi
  step="ncu of the d12 step"
  bounded "$secs" mpirun -np 1 --bind-to none "${ncu[@]}" --metrics "$metrics" \
    --launch-count 4000 "$st" train --model d12 --device cuda \
    --data-train "$work/random_train.bin" --seq-len "$SEQ" --micro-batch "$mb" --grad-accum 1 \
    --steps 2 --param-dtype bf16 --reduce-dtype bf16 --quiet \
    > "$work/ncu_step.csv" 2> "$work/ncu_step.err"
  rc=$?
  pack_logs
  if [ $rc -ne 0 ]; then
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      echo "ncu on the step: exit $rc, cut after $secs s"
    else
      echo "ncu failed on the step: $(tail -1 "$work/ncu_step.err")"
    fi
    return 1
  fi
  echo "shardtrain d12, ZeRO-0, $attention attention, micro-batch $mb x $SEQ, grad-accum 1" \
    "(once-per-step kernels such as AdamW weigh $((BATCH_TOKENS / (mb * SEQ))) times more here" \
    "than in a $BATCH_TOKENS-token step)"
  timeout -k 2 10 python3 "$here/benchmarks/kernel_table.py" "$work/ncu_step.csv" \
    --ceilings "$out/ceilings.txt" "${calibration[@]}" --csv "$out/kernels.csv"
}
if [ $kernels = 1 ]; then
  echo "== kernels ($SECONDS s of --budget $budget)"
  # Not in a pipeline (| tee): its steps must run in this shell, where stop can reach them.
  kernel_table > "$out/kernels.txt" 2>&1
  cat "$out/kernels.txt"
fi
pack_logs
echo "== done in $SECONDS s of --budget $budget"
exit "$status"
