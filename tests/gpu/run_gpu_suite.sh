#!/usr/bin/env bash
# run_gpu_suite.sh - the GPU checks of the GPU core (issue 8), run on the GPU machine from a
# bundle made by tools/gpu_bundle.sh:
#   source gpu/env.sh && bash tests/gpu/run_gpu_suite.sh gpu SECTION...
# Sections (each prints its checks and ends with "SECTION: passed" or "SECTION: FAILED"; logs go
# to $OUT when the device tool sets it, else to gpu/logs):
#   ops          every kernel test binary (each op on the CUDA backend against float64 loops and
#                the CPU backend; ops_vocab_test walks the whole vocabulary), the cast, the
#                offloaded optimizer and the device's streams, events and memory query
#   train        tests/gpu/train_gpu_test.sh: tiny fp32 GPU vs CPU per step, bf16/fp16 and bf16
#                params with fp32 gradients vs fp32; then tests/train/checkpoint_async_test.sh
#                with its training runs on the GPU (4 ranks share it through nccl-hostid):
#                background saves, from a pinned snapshot, equal to blocking ones byte for byte
#   streams      the collectives on device buffers and a unit's stream-ordered gather, publish
#                and reduction (duplicate NCCL communicators, events between streams) on 1 and 2
#                ranks sharing the GPU through nccl-hostid; the public unit calls (state written,
#                published, read back; a publish refused on every rank) on 4; then an NCCL
#                set-up that one rank cannot join (NCCL_SOCKET_IFNAME names no interface on
#                rank 1): the job must
#                end, non-zero, with an error line, within 120 s at ST_COMM_TIMEOUT=10 (the
#                deadline of core/deadline.h, or NCCL's own error on every rank), not hang
#   equivalence  tests/train/equivalence_test.sh on the GPU with NCCL (2-8 ranks share the one
#                GPU through nccl-hostid): every mesh and stage against one rank, bitwise
#                across stages at equal mesh
#   d12          d12 in bf16, micro-batch 16 x 1024, 20 steps on one GPU (simple attention, then
#                ST_CUDA_ATTENTION=flash and =cudnn: each within 1% of simple's losses, and no
#                fallback warned about) and on 4 ranks at ZeRO-3: the loss falls; prints step
#                time and tokens/s (median of steps 6-20)
#   calibrate    the simulator's GPU calibration and validation (docs/SIMULATOR.md) in one
#                command: benchmarks/hardware/measure_gpu.sh writes gpu_shared.hw (the hardware
#                file of ranks sharing this GPU) and gpu_shared.txt (its tables), then
#                benchmarks/validate_simulator.sh --only gpu-measured trains d12, d24 and d48 at
#                world 1 and d12 on 2, 4 and 8 ranks at ZeRO-1 and ZeRO-3 (4 steps, one round)
#                and writes validation.md, measured against predicted; passes when both finish
#                and the table has its 9 rows. Expected on an H100 (estimates: written without
#                a GPU), about 5 minutes of the 6 it must stay under:
#                  ceilings 10 s, mpi_p2p 3 s, op_timings (d12 and d48 micro-batches, two
#                  optimizer passes) 20 s, NCCL's curves (3 rank counts x 3 sizes x 2 launches
#                  of 5 ops, each launch setting NCCL up) 90 s;
#                  world 1: d12 10 s, d24 15 s, d48 45 s (mostly the host initialising 1.5B
#                  parameters); d12 on 2-8 ranks: 6 runs of about 15 s (NCCL's socket
#                  transport moves 250 MB a step at ZeRO-1, 375 MB at ZeRO-3)
#   sanitizer    compute-sanitizer memcheck, racecheck and synccheck on ops_vocab_test and on a
#                2-rank, 3-step d6 run
# Exit status: 0 when every section asked for passed.
set -uo pipefail
bundle=$(cd "${1:?usage: run_gpu_suite.sh BUNDLE_DIR SECTION...}" && pwd)
shift
here=$(cd "$(dirname "$0")/../.." && pwd)
# tools/gpu_bundle.sh ships bin/, lib/ and fortunes/ compressed.
if [ ! -d "$bundle/bin" ]; then
  tar -xJf "$bundle/bundle.tar.xz" -C "$bundle" || { echo "run_gpu_suite: cannot unpack the bundle"; exit 2; }
fi
logs=${OUT:-$bundle/logs}
mkdir -p "$logs"
bin=$bundle/bin
st=$bin/shardtrain
# cuDNN's frontend loads a libcudart of its own (a workaround it applies on cuDNN <= 9.15) and
# takes libcudart.so.12 first where both majors are installed: this build is CUDA 13's.
export CUDNN_FRONTEND_CUDART_LIB_NAME=${CUDNN_FRONTEND_CUDART_LIB_NAME:-libcudart.so.13}
mpirun_sh=$here/tests/mpirun.sh
# prepare_bytes.py reads Debian's fortunes by default; the bundle carries the text.
if [ ! -d /usr/share/games/fortunes ]; then
  mkdir -p /usr/share/games && ln -s "$bundle/fortunes" /usr/share/games/fortunes
fi
data=$bundle/data
[ -f "$data/bytes_train_000000.bin" ] ||
  python3 "$here/tools/prepare_bytes.py" --out-dir "$data" > /dev/null || exit 1

# Each test binary under a limit of OPS_TEST_LIMIT seconds (default 120; 124: it hung), so one
# hang does not spend the device command's whole time.
section_ops() {
  local fail=0 t name start
  for t in "$bin"/*_test; do
    name=$(basename "$t")
    start=$(date +%s)
    if timeout "${OPS_TEST_LIMIT:-120}" "$t" > "$logs/$name.log" 2>&1; then
      echo "ok   $name ($(($(date +%s) - start)) s): $(tail -1 "$logs/$name.log")"
    else
      echo "FAIL $name (exit $?, $(($(date +%s) - start)) s):"; tail -20 "$logs/$name.log"; fail=1
    fi
  done
  return $fail
}

section_train() {
  local fail=0
  bash "$here/tests/gpu/train_gpu_test.sh" "$st" "$here/tools/prepare_bytes.py" "$mpirun_sh" ||
    fail=1
  TRAIN_RUN_FLAGS="--device cuda" TRAIN_RUN_WRAPPER="$bin/nccl-hostid" \
    bash "$here/tests/train/checkpoint_async_test.sh" "$st" "$here/tools/prepare_bytes.py" \
    "$mpirun_sh" || fail=1
  return $fail
}

# An NCCL set-up that rank 1 cannot join must end the job, not hang it (see the top).
setup_stall_check() {
  local log="$logs/nccl_setup_stall.log" start rc
  start=$(date +%s)
  # shellcheck disable=SC2016  # the inner script expands its own variables, on each rank
  ST_COMM_TIMEOUT=10 timeout 120 "$mpirun_sh" 2 bash -c \
    'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export NCCL_SOCKET_IFNAME=st_no_such_if; fi; exec "$@"' \
    stall "$bin/nccl-hostid" "$st" selftest --device cuda --backend nccl --count 1024 --iters 1 \
    > "$log" 2>&1
  rc=$?
  local took=$(($(date +%s) - start))
  if grep -q "no usable GPU" "$log"; then
    echo "FAIL NCCL set-up that one rank cannot join: no usable GPU"; return 1
  fi
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -qi "error" "$log"; then
    echo "ok   NCCL set-up that one rank cannot join: exit $rc after ${took} s:" \
      "$(grep -i -m1 "did not finish within\|error" "$log")"
    return 0
  fi
  echo "FAIL NCCL set-up that one rank cannot join: exit $rc after ${took} s (124: hung):"
  tail -20 "$log"
  return 1
}

section_streams() {
  local fail=0
  for t in collectives_gpu_test unit_streams_gpu_test; do
    for ranks in 1 2; do
      local log="$logs/${t}_np$ranks.log"
      if "$mpirun_sh" "$ranks" "$bin/nccl-hostid" "$bin/${t}_bin" --device cuda > "$log" 2>&1; then
        echo "ok   $t on $ranks ranks: $(tail -1 "$log")"
      else
        echo "FAIL $t on $ranks ranks:"; tail -20 "$log"; fail=1
      fi
    done
  done
  local log="$logs/public_unit_gpu_test_np4.log"
  if "$mpirun_sh" 4 "$bin/nccl-hostid" "$bin/public_unit_gpu_test_bin" --device cuda > "$log" 2>&1
  then
    echo "ok   public_unit_gpu_test on 4 ranks: $(tail -1 "$log")"
  else
    echo "FAIL public_unit_gpu_test on 4 ranks:"; tail -20 "$log"; fail=1
  fi
  setup_stall_check || fail=1
  return $fail
}

section_equivalence() {
  TRAIN_RUN_FLAGS="--device cuda" TRAIN_RUN_WRAPPER="$bin/nccl-hostid" \
    bash "$here/tests/train/equivalence_test.sh" "$st" "$here/tools/prepare_bytes.py" "$mpirun_sh"
}

# d12_run NAME RANKS FLAGS...: 20 steps of d12 in bf16 at micro-batch 16 x 1024, then the loss
# must fall and the step time is printed.
d12_run() {
  local name=$1 ranks=$2
  shift 2
  "$mpirun_sh" "$ranks" "$bin/nccl-hostid" "$st" train --model d12 --device cuda \
    --data-train "$data/bytes_train_*.bin" --steps 20 --micro-batch 16 --param-dtype bf16 \
    --reduce-dtype bf16 --lr 6e-4 --warmup 5 --metrics "$logs/$name.jsonl" "$@" \
    > "$logs/$name.log" 2>&1 || { echo "FAIL $name:"; tail -20 "$logs/$name.log"; return 1; }
  python3 - "$logs/$name.jsonl" "$name" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
name = sys.argv[2]
steady = rows[5:] or rows
ms = statistics.median(r["step_ms"] for r in steady)
tps = statistics.median(r["tokens_per_s"] for r in steady)
print(f"{name}: loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f} over {len(rows)} steps, "
      f"step {ms:.1f} ms, {tps:.0f} tokens/s (medians of steps 6-{len(rows)})")
sys.exit(0 if len(rows) == 20 and rows[-1]["loss"] < rows[0]["loss"] else 1)
PY
}

# d12_kind KIND: the one-GPU d12 run again with ST_CUDA_ATTENTION=KIND, from the same initial
# weights: every step's loss within 1% of the simple kernels' run (d12_1gpu), and no warning
# that another kind ran instead (cuDNN not loaded, a shape refused).
d12_kind() {
  local kind=$1
  ST_CUDA_ATTENTION=$kind d12_run "d12_1gpu_$kind" 1 || return 1
  if grep -q "attention kernels run" "$logs/d12_1gpu_$kind.log"; then
    echo "FAIL d12_1gpu_$kind: another kind ran: $(grep -m1 "attention kernels run" \
      "$logs/d12_1gpu_$kind.log")"
    return 1
  fi
  python3 - "$logs/d12_1gpu.jsonl" "$logs/d12_1gpu_$kind.jsonl" "$kind" <<'PY'
import json, sys
simple, other = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(other, simple))
print(f"d12 {sys.argv[3]} vs simple attention: worst step loss difference {worst:.2e} (bound 1e-2)")
sys.exit(0 if len(other) == len(simple) == 20 and worst <= 1e-2 else 1)
PY
}

section_d12() {
  local fail=0
  d12_run d12_1gpu 1 || fail=1
  # The tiled kernels (kernels/cuda/flash_attention.cu) and cuDNN's (cudnn_attention.cpp).
  d12_kind flash || fail=1
  d12_kind cudnn || fail=1
  d12_run d12_4ranks_zero3 4 --dp-shard 4 --zero 3 || fail=1
  return $fail
}

section_calibrate() {
  local hw=$logs/gpu_shared.hw table=$logs/validation.md
  BIN=$bin bash "$here/benchmarks/hardware/measure_gpu.sh" "$hw" > "$logs/calibrate.log" 2>&1 ||
    { echo "FAIL measure_gpu.sh:"; tail -20 "$logs/calibrate.log"; return 1; }
  echo "ok   measure_gpu.sh: $hw, $(grep -c '^eff_' "$hw") efficiencies and curves"
  SHARDTRAIN=$st LAUNCH_WRAPPER=$bin/nccl-hostid bash "$here/benchmarks/validate_simulator.sh" \
    --only gpu-measured --hardware "$hw" --steps 4 --rounds 1 > "$table" 2>> "$logs/calibrate.log" ||
    { echo "FAIL validate_simulator.sh:"; tail -30 "$table" "$logs/calibrate.log"; return 1; }
  cat "$table"
  [ "$(grep -c '^| d[0-9]' "$table")" -eq 9 ] || { echo "FAIL: the table has not 9 rows"; return 1; }
}

section_sanitizer() {
  local fail=0 tool
  for tool in memcheck racecheck synccheck; do
    if compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/ops_vocab_test" \
      > "$logs/sanitizer_ops_$tool.log" 2>&1; then
      echo "ok   $tool ops_vocab_test: $(grep -m1 'ERROR SUMMARY' "$logs/sanitizer_ops_$tool.log")"
    else
      echo "FAIL $tool ops_vocab_test:"; tail -30 "$logs/sanitizer_ops_$tool.log"; fail=1
    fi
    if "$mpirun_sh" 2 "$bin/nccl-hostid" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$st" train --model d6 --device cuda --data-train "$data/bytes_train_*.bin" --steps 3 \
      --micro-batch 2 --dp-shard 2 --zero 3 --param-dtype bf16 --reduce-dtype bf16 \
      > "$logs/sanitizer_d6_$tool.log" 2>&1; then
      echo "ok   $tool d6 on 2 ranks: $(grep -c 'ERROR SUMMARY: 0 errors' "$logs/sanitizer_d6_$tool.log") clean summaries"
    else
      echo "FAIL $tool d6 on 2 ranks:"; tail -30 "$logs/sanitizer_d6_$tool.log"; fail=1
    fi
  done
  return $fail
}

for section in "$@"; do
  case $section in
    ops | train | streams | equivalence | d12 | calibrate | sanitizer) ;;
    *) echo "run_gpu_suite: unknown section '$section'"; exit 2 ;;
  esac
done
# Each section's time is printed after it, for planning the next session's device time.
status=0
for section in "$@"; do
  echo "== $section"
  start=$(date +%s)
  if "section_$section"; then
    echo "$section: passed ($(($(date +%s) - start)) s)"
  else
    echo "$section: FAILED ($(($(date +%s) - start)) s)"; status=1
  fi
done
exit $status
