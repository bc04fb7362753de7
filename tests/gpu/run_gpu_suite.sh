#!/usr/bin/env bash
# run_gpu_suite.sh - the GPU checks of the GPU core (issue 8), run on the GPU machine from a
# bundle made by tools/gpu_bundle.sh:
#   source gpu/env.sh && SUITE_BUDGET=SECONDS exec bash tests/gpu/run_gpu_suite.sh gpu SECTION...
# A session has 15 minutes of device time, the machine's start included, so two commands
# (docs/BUILD.md, "The GPU suite"), each with the device tool's timeout_s = SUITE_BUDGET + 25:
#   1. ops train streams d12     (SUITE_BUDGET=480)
#   2. d12x4 equivalence         (after the first is read; SUITE_BUDGET = status's budget_left_s
#                                 less 60, at most 575; sanitizer and calibrate: later)
# Every command starts with `preflight`, which stops the command at once (with a line saying
# why) where nothing else could pass. Then each section prints one line a run or binary,
# "[  T s] ok   NAME (N s)" or "[  T s] FAIL NAME (N s, exit X)" followed by at most the last
# 1,500 bytes of its log (T: seconds since the start), ends with "SECTION: passed (N s)" or
# "SECTION: FAILED (N s)", and the command ends with a summary: one line a section, one a
# failure, and the verdict, always inside the last 12,000 characters that come back.
# Sections:
#   preflight    (always first, about 10 s) the bundle unpacks (python3's tarfile where xz is
#                missing); nvidia-smi -L lists a GPU (its persistence mode and used memory are
#                printed); no bundled binary lacks a library (ldd); libcublasLt.so.13 is found;
#                mpirun, python3 and timeout exist (libnccl.so.2, libcudnn.so.9,
#                libnvrtc.so.13, libcudart.so.13 and compute-sanitizer are reported); mpirun
#                starts a rank; device_cuda_test and cast_test run on the GPU
#   ops          every kernel test binary (each op on the CUDA backend against float64 loops and
#                the CPU backend), the cast, the offloaded optimizer and the device's streams,
#                events and memory query, then ops_vocab_test, which walks the whole vocabulary
#                (its cuDNN graphs are built at run time: it may take OPS_VOCAB_LIMIT, 300 s)
#   train        tests/gpu/train_gpu_test.sh: tiny fp32 GPU vs CPU per step, bf16/fp16 and bf16
#                params with fp32 gradients vs fp32; then tests/train/checkpoint_async_test.sh
#                with its training runs on the GPU (4 ranks share it through nccl-hostid):
#                background saves, from a pinned snapshot, equal to blocking ones byte for byte
#   streams      the collectives on device buffers and a unit's stream-ordered gather, publish
#                and reduction (duplicate NCCL communicators, events between streams) on 1 and 2
#                ranks sharing the GPU through nccl-hostid; the public unit calls (state written,
#                published, read back; a publish refused on every rank) on 4; a stream that
#                waits for an all-reduce rank 1 never joins: the host's wait for it ends the job
#                within ST_COMM_TIMEOUT (tests/sharding/device_wait_timeout_test.sh); then an NCCL
#                set-up that one rank cannot join (NCCL_SOCKET_IFNAME names no interface on
#                rank 1): the job must end, non-zero, within 120 s at ST_COMM_TIMEOUT=10, with
#                a line naming ncclCommInitRankConfig (NCCL's own error) or "did not finish
#                within" (the deadline of core/deadline.h), not hang
#   d12          d12 in bf16, micro-batch 16 x 1024, 20 steps on one GPU: ST_CUDA_ATTENTION=simple,
#                then =flash and =cudnn (the default), each within 1% of simple's losses and no
#                fallback warned about; the loss falls; prints step time and tokens/s (median of
#                steps 6-20)
#   d12x4        the same d12 run on 4 ranks sharing the GPU at ZeRO-3 (--dp-shard 4)
#   equivalence  tests/train/equivalence_test.sh on the GPU with NCCL (2-8 ranks share the one
#                GPU through nccl-hostid): every mesh and stage against one rank, bitwise
#                across stages at equal mesh. It takes whatever the budget leaves (up to 540 s),
#                so it comes last in its command
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
#   sanitizer    compute-sanitizer memcheck, synccheck and racecheck, in that order, on
#                ops_vocab_test (without d12's attention shape) and on a 2-rank, 3-step d6 run
#                (each run cut at SANITIZER_RUN_LIMIT, 150 s); synccheck and racecheck leave
#                cuDNN's attention out (ops_vocab_test's cudnn kind; d6 runs flash)
# Time: each section has a hard bound (below, seconds) and so has each run in it; nothing
# starts past the command's budget, SUITE_BUDGET seconds from the start (given by the caller:
# the device tool kills a command at its timeout_s and then returns only the files under $OUT;
# default 480 times SUITE_TIME_SCALE), less 20 s kept for the summary and the logs' packing; a
# section left with under 20 s is reported "not run" (a failure). A hang costs its run's bound,
# not the command. A run cut short by its section's end (or the budget) says "cut"; one that
# ran out its own bound, "timed out".
#   section bounds: preflight 90, ops 330 (a binary 90, ops_vocab_test 300), train 240 (a run
#   60), streams 150 (a job 60), d12 210 (a run 90), d12x4 150, equivalence 540 (a run 60),
#   calibrate 360, sanitizer 540; all multiplied by SUITE_TIME_SCALE (default 1; the CUDA
#   emulation's rehearsal, tools/cuda_emu/rehearse_suite.sh, sets more)
# Every run is started in the background under `timeout` (which leads a process group of its
# own) and waited for, so a TERM or INT to the suite is handled at once: the run in flight is
# ended (TERM to its group, KILL 3 s later), the section is reported stopped and the summary
# written. A test script's bound reaches its runs: they stop 15 s before it (TRAIN_RUN_DEADLINE,
# ST_SUITE_DEADLINE), so the script still checks what ran, and a TERM to it ends its run in
# flight (tests/train/train_runs.sh). Every mpirun runs under `timeout` (the suite's own and
# train_runs.sh's, through a wrapper given to the scripts as their mpirun.sh). Exported for
# every run: ST_TEST_REQUIRE_GPU=1 (a test that would SKIP fails instead: tests/testing.h),
# ST_COMM_TIMEOUT=20 (under the runs' 60 s, so a stalled NCCL set-up or collective ends with
# the product's "did not finish within" line), NCCL_DEBUG=WARN, .bazelrc's Open MPI settings
# for tests where unset (gpu/env.sh sets them too: without them Open MPI 4.1 looks for ssh to
# start even one rank), and for the scripts TRAIN_RUN_KEEP_GOING=1 (tests/train/train_runs.sh:
# a failed run is recorded and the next one runs).
# Logs: under BUNDLE/logs/<time>-<sections>/ (the scripts' runs in subfolders there). Where the
# device tool sets OUT (it brings back at most 8 files, and of a command it kills only what is
# already under $OUT): everything the suite prints goes to $OUT/suite.log as it is printed,
# $OUT/summary.txt is rewritten at each section's start and end (until the end it says what
# was running and that no verdict is in), and at the end the logs are packed into
# $OUT/logs.tar.xz (logs.tar.gz without xz; the text of the logs, of a file of 4 MiB or more
# its last MiB; at most 20 s), with calibrate's gpu_shared.hw, gpu_shared.txt and validation.md.
# Exit status: 0 when every section asked for passed; 1 otherwise (a stop by a signal, and the
# suite's own unexpected end, "SECTION: CRASHED", included); 2 for a usage error.
set -uo pipefail
bundle=$(cd "${1:?usage: run_gpu_suite.sh BUNDLE_DIR SECTION...}" && pwd) || exit 2
shift
here=$(cd "$(dirname "$0")/../.." && pwd)
sections=(preflight)
for section in "$@"; do
  case $section in
    preflight) ;;
    ops | train | streams | d12 | d12x4 | equivalence | calibrate | sanitizer)
      sections+=("$section") ;;
    *) echo "run_gpu_suite: unknown section '$section' (preflight ops train streams d12 d12x4" \
      "equivalence calibrate sanitizer)"; exit 2 ;;
  esac
done

scale=${SUITE_TIME_SCALE:-1}
case $scale in
  '' | *[!0-9]*) echo "run_gpu_suite: SUITE_TIME_SCALE='$scale' is not a whole number"; exit 2 ;;
esac
budget=${SUITE_BUDGET:-$((480 * scale))}
case $budget in
  '' | *[!0-9]*) echo "run_gpu_suite: SUITE_BUDGET='$budget' is not a whole number of seconds"
    exit 2 ;;
esac
suite_start=$(date +%s)
suite_end=$((suite_start + budget - 20))
declare -A bound=([preflight]=90 [ops]=330 [train]=240 [streams]=150 [d12]=210 [d12x4]=150
  [equivalence]=540 [calibrate]=360 [sanitizer]=540)
logs=$bundle/logs/$(date +%Y%m%d-%H%M%S)-$(IFS=-; echo "${sections[*]}")
mkdir -p "$logs" || exit 2
summary=()   # one line a section
failures=()  # one line a failure
status=0     # the verdict: 0 passed, 1 failed
section=     # the section running, and
si=0         # its index in sections
current=     # the section running, for the partial summaries
section_start=$suite_start
section_end=$suite_end
ended=0      # 1 once the suite ends as planned (or stopped): any other end is a crash
child=       # the run in flight: a `timeout` leading its own process group,
running=     # and its name
bin=$bundle/bin
st=$bin/shardtrain
data=$bundle/data
mpirun_sh=$here/tests/mpirun.sh

# The output, the summary, bounded runs and the end (and the traps); the preflight.
# shellcheck source=tests/gpu/suite_runs.sh
. "$here/tests/gpu/suite_runs.sh"
# shellcheck source=tests/gpu/suite_preflight.sh
. "$here/tests/gpu/suite_preflight.sh"

# ---- set-up ---------------------------------------------------------------------------------

# tools/gpu_bundle.sh ships bin/, lib/ and fortunes/ in bundle.tar.xz. Unpacked into a folder of
# its own first, so a command killed halfway leaves no half bundle behind.
unpack() {
  [ -d "$bundle/bin" ] && return 0
  [ -f "$bundle/bundle.tar.xz" ] ||
    { echo "no bundle.tar.xz (tools/gpu_bundle.sh makes it)"; return 1; }
  local tmp=$bundle/.unpack
  rm -rf "$tmp" && mkdir -p "$tmp" || return 1
  if [ -n "$(command -v xz)" ]; then
    tar -xJf "$bundle/bundle.tar.xz" -C "$tmp" || return 1
  else
    echo "note: no xz here: unpacking with python3's tarfile"
    python3 - "$bundle/bundle.tar.xz" "$tmp" <<'PY' || return 1
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    try:
        t.extractall(sys.argv[2], filter="fully_trusted")
    except TypeError:  # a Python without extraction filters
        t.extractall(sys.argv[2])
PY
  fi
  local part
  for part in lib fortunes bin; do
    [ ! -e "$tmp/$part" ] || mv "$tmp/$part" "$bundle/$part" || return 1
  done
  rm -rf "$tmp"
}

write_summary 0
if ! unpack > "$logs/unpack.log" 2>&1; then
  why_unpack=$(tail -n 3 "$logs/unpack.log" | tr '\n' ' ' | cut -c 1-300)
  section=preflight
  say "FAIL preflight: cannot unpack $bundle/bundle.tar.xz: $why_unpack"
  summary+=("preflight: FAILED (the bundle cannot be unpacked)")
  failed "cannot unpack $bundle/bundle.tar.xz: $why_unpack"
  not_run_rest "preflight failed"
  status=1
  ended=1
  exit 1
fi
[ ! -s "$logs/unpack.log" ] || say "$(head -c 300 "$logs/unpack.log")"
# cuDNN's frontend loads a libcudart of its own (a workaround it applies on cuDNN <= 9.15) and
# takes libcudart.so.12 first where both majors are installed: this build is CUDA 13's.
export CUDNN_FRONTEND_CUDART_LIB_NAME=${CUDNN_FRONTEND_CUDART_LIB_NAME:-libcudart.so.13}
# compute-sanitizer lives beside nvcc, which the image may leave off PATH.
[ -n "$(command -v compute-sanitizer)" ] || [ ! -d /usr/local/cuda/bin ] ||
  export PATH=$PATH:/usr/local/cuda/bin
# Open MPI as the tests run it (.bazelrc's test_env; gpu/env.sh sets the same), where unset:
# started without ssh or rsh (plm isolated: one node), ranks over shared memory, as root.
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-0}
export ST_TEST_REQUIRE_GPU=1 TRAIN_RUN_KEEP_GOING=1 TRAIN_RUN_LOG_DIR=$logs
export ST_COMM_TIMEOUT=${ST_COMM_TIMEOUT:-$((20 * scale))} NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TRAIN_RUN_TIMEOUT=$((60 * scale))
# Every mpirun the scripts start goes through this, under `timeout`: its own limit
# (ST_SUITE_MPIRUN_LIMIT) and no later than 5 s past the script's deadline (ST_SUITE_DEADLINE).
# Not at it: train_runs.sh cuts its runs at that deadline with a `timeout` of its own around
# this one, and an inner `timeout` whose time runs out just after the outer one's TERM reached
# it sends KILL at once, which ends mpirun before it ends its ranks (each in a process group of
# its own: they would run on).
timed_mpirun=$logs/.mpirun_timed.sh
cat > "$timed_mpirun" <<EOW
#!/usr/bin/env bash
left=\$((\${ST_SUITE_DEADLINE:-\$((\$(date +%s) + 86400))} + 5 - \$(date +%s)))
secs=\${ST_SUITE_MPIRUN_LIMIT:-$((300 * scale))}
[ "\$left" -lt "\$secs" ] && secs=\$left
if [ "\$secs" -le 0 ]; then
  echo "mpirun (run_gpu_suite): not started, the section's time is spent"
  exit 124
fi
exec timeout -k 10 "\$secs" "$mpirun_sh" "\$@"
EOW
chmod +x "$timed_mpirun"

# ---- sections -------------------------------------------------------------------------------

# Each binary under its bound (90 s; ops_vocab_test OPS_VOCAB_LIMIT, 300 s: cuDNN builds its
# graphs at run time), so one hang does not spend the command. ops_vocab_test comes last.
section_ops() {
  local fail=0 t name
  for t in "$bin"/*_test; do
    name=$(basename "$t")
    [ "$name" != ops_vocab_test ] || continue
    bounded "$name" "${OPS_TEST_LIMIT:-90}" "$logs/$name.log" "$t" || fail=1
  done
  bounded ops_vocab_test "${OPS_VOCAB_LIMIT:-300}" "$logs/ops_vocab_test.log" \
    "$bin/ops_vocab_test" || fail=1
  return $fail
}

section_train() {
  local fail=0
  run_script train_gpu_test 150 bash "$here/tests/gpu/train_gpu_test.sh" "$st" \
    "$here/tools/prepare_bytes.py" "$timed_mpirun" || fail=1
  TRAIN_RUN_FLAGS="--device cuda" TRAIN_RUN_WRAPPER="$bin/nccl-hostid" \
    run_script checkpoint_async_test 240 bash "$here/tests/train/checkpoint_async_test.sh" "$st" \
    "$here/tools/prepare_bytes.py" "$timed_mpirun" || fail=1
  return $fail
}

# An NCCL set-up that rank 1 cannot join must end the job, not hang it (see the top): non-zero,
# not by the bound, with NCCL's error or the set-up's deadline named.
setup_stall_check() {
  local log=$logs/nccl_setup_stall.log start rc secs want=$((120 * scale))
  secs=$(limit 120)
  [ "$secs" -gt 0 ] || { not_started "NCCL set-up stall"; return 1; }
  start=$(now)
  running="NCCL set-up stall"
  # shellcheck disable=SC2016  # the inner script expands its own variables, on each rank
  waited "$log" env ST_COMM_TIMEOUT=10 timeout -k 10 "$secs" "$mpirun_sh" 2 bash -c \
    'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export NCCL_SOCKET_IFNAME=st_no_such_if; fi
     exec "$@"' \
    stall "$bin/nccl-hostid" "$st" selftest --device cuda --backend nccl --count 1024 --iters 1
  rc=$?
  running=
  local took=$(($(now) - start)) named='ncclCommInitRankConfig|did not finish within'
  if grep -q "no usable GPU" "$log"; then
    say "FAIL NCCL set-up that one rank cannot join ($took s): no usable GPU"
    failed "NCCL set-up stall: no usable GPU"
    return 1
  fi
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && grep -qE "$named" "$log"; then
    say "ok   NCCL set-up that one rank cannot join ($took s, exit $rc):" \
      "$(grep -m1 -E "$named" "$log" | cut -c 1-200)"
    return 0
  fi
  local what
  what=$(why "$rc" "$secs" "$want")
  [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] ||
    what="$what, but no line names ncclCommInitRankConfig or 'did not finish within'"
  say "FAIL NCCL set-up that one rank cannot join ($took s, $what)"
  excerpt "$log"
  failed "NCCL set-up stall ($took s, $what)"
  return 1
}

section_streams() {
  local fail=0 t ranks
  for t in collectives_gpu_test unit_streams_gpu_test; do
    for ranks in 1 2; do
      bounded "$t on $ranks ranks" 60 "$logs/${t}_np$ranks.log" \
        "$mpirun_sh" "$ranks" "$bin/nccl-hostid" "$bin/${t}_bin" --device cuda || fail=1
    done
  done
  bounded "public_unit_gpu_test on 4 ranks" 60 "$logs/public_unit_gpu_test_np4.log" \
    "$mpirun_sh" 4 "$bin/nccl-hostid" "$bin/public_unit_gpu_test_bin" --device cuda || fail=1
  bounded "a stream's wait for a collective that never finishes" 60 \
    "$logs/device_wait_timeout_test.log" bash "$here/tests/sharding/device_wait_timeout_test.sh" \
    "$mpirun_sh" "$bin/nccl-hostid" "$bin/timeout_skipper" || fail=1
  setup_stall_check || fail=1
  return $fail
}

# The rest of the budget (up to 540 s), so it comes last in its command.
section_equivalence() {
  TRAIN_RUN_FLAGS="--device cuda" TRAIN_RUN_WRAPPER="$bin/nccl-hostid" \
    run_script equivalence_test 540 bash "$here/tests/train/equivalence_test.sh" "$st" \
    "$here/tools/prepare_bytes.py" "$timed_mpirun"
}

# check_failed NAME WHAT OUT: a failed check of a run's results: the end of OUT (what the check
# printed, also in NAME.check.txt) and a failure WHAT for the summary.
check_failed() {
  printf '%s\n' "$3" > "$logs/$1.check.txt"
  say "FAIL $1: $2: $(tail -c 600 <<< "$3")"
  failed "$1: $2"
}

# d12_run NAME RANKS SECONDS FLAGS...: 20 steps of d12 in bf16 at micro-batch 16 x 1024 under
# a bound of SECONDS, then the loss must fall and the step time is printed.
d12_run() {
  local name=$1 ranks=$2 secs=$3 out
  shift 3
  bounded "$name" "$secs" "$logs/$name.log" "$mpirun_sh" "$ranks" "$bin/nccl-hostid" "$st" \
    train --model d12 --device cuda --data-train "$data/bytes_train_*.bin" --steps 20 \
    --micro-batch 16 --param-dtype bf16 --reduce-dtype bf16 --lr 6e-4 --warmup 5 \
    --metrics "$logs/$name.jsonl" "$@" || return 1
  out=$(python3 - "$logs/$name.jsonl" "$name" 2>&1 <<'PY'
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
  ) && { say "ok   $out"; return 0; }
  check_failed "$name" "not 20 steps with a falling loss" "$out"
  return 1
}

# d12_kind KIND: the one-GPU d12 run again with ST_CUDA_ATTENTION=KIND, from the same initial
# weights: every step's loss within 1% of the simple kernels' run (d12_1gpu), and no warning
# that another kind ran instead (cuDNN not loaded, a shape refused).
d12_kind() {
  local kind=$1 out
  ST_CUDA_ATTENTION=$kind d12_run "d12_1gpu_$kind" 1 90 || return 1
  if grep -q "attention kernels run" "$logs/d12_1gpu_$kind.log"; then
    say "FAIL d12_1gpu_$kind: another kind ran: $(grep -m1 "attention kernels run" \
      "$logs/d12_1gpu_$kind.log" | cut -c 1-200)"
    failed "d12_1gpu_$kind: another kind ran"
    return 1
  fi
  out=$(python3 - "$logs/d12_1gpu.jsonl" "$logs/d12_1gpu_$kind.jsonl" "$kind" 2>&1 <<'PY'
import json, sys
simple, other = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(other, simple))
print(f"d12 {sys.argv[3]} vs simple attention: worst step loss difference {worst:.2e} (bound 1e-2)")
sys.exit(0 if len(other) == len(simple) == 20 and worst <= 1e-2 else 1)
PY
  ) && { say "ok   $out"; return 0; }
  check_failed "d12_1gpu_${kind}_vs_simple" "losses against simple attention" "$out"
  return 1
}

section_d12() {
  local fail=0
  ST_CUDA_ATTENTION=simple d12_run d12_1gpu 1 90 || fail=1
  # The tiled kernels (kernels/cuda/flash_attention.cu) and cuDNN's (cudnn_attention.cpp).
  d12_kind flash || fail=1
  d12_kind cudnn || fail=1
  return $fail
}

section_d12x4() {
  d12_run d12_4ranks_zero3 4 150 --dp-shard 4 --zero 3
}

section_calibrate() {
  local hw=$logs/gpu_shared.hw table=$logs/validation.md fail=0
  BIN=$bin bounded "measure_gpu.sh" 360 "$logs/calibrate_measure.log" \
    bash "$here/benchmarks/hardware/measure_gpu.sh" "$hw" || return 1
  say "     $hw: $(grep -c '^eff_' "$hw") efficiencies and curves"
  # The table is validate_simulator.sh's standard output; its log, the rest.
  # shellcheck disable=SC2016  # expanded by the inner shell
  SHARDTRAIN=$st LAUNCH_WRAPPER=$bin/nccl-hostid bounded "validate_simulator.sh" 360 \
    "$logs/calibrate_validate.log" bash -c 'out=$1; shift; exec "$@" > "$out"' validate \
    "$table" bash "$here/benchmarks/validate_simulator.sh" --only gpu-measured \
    --hardware "$hw" --steps 4 --rounds 1 || fail=1
  [ -f "$table" ] && head -c 3000 "$table"
  if [ "$(grep -c '^| d[0-9]' "$table" 2>&1)" != 9 ]; then
    say "FAIL validation.md has not 9 rows"
    failed "validation.md has not 9 rows"
    fail=1
  fi
  return $fail
}

section_sanitizer() {
  local fail=0 tool
  if [ -z "$(command -v compute-sanitizer)" ]; then
    say "FAIL compute-sanitizer: not on PATH, nor in /usr/local/cuda/bin"
    failed "no compute-sanitizer"
    return 1
  fi
  # memcheck first, racecheck (the slowest) last, so that a short budget cuts the slowest.
  # ops_vocab_test leaves out d12's attention shape (OPS_VOCAB_SMALL). racecheck and synccheck
  # are for this project's kernels: they leave cuDNN's attention to memcheck (OPS_VOCAB_CUDNN=0,
  # and the d6 run's attention is flash, the tiled kernels of kernels/cuda/flash_attention.cu)
  # and, where this compute-sanitizer can, NCCL's kernels too; cuBLASLt's and CUB's stay in, so
  # a report's kernel name says whose it is.
  local cudnn attention exclude skip_nccl=()
  if compute-sanitizer --help 2>&1 | grep -q -- '--kernel-name-exclude'; then
    skip_nccl=(--kernel-name-exclude kns=nccl)
  else
    say "note: this compute-sanitizer has no --kernel-name-exclude: NCCL's kernels are checked"
  fi
  for tool in memcheck synccheck racecheck; do
    cudnn=1 attention=cudnn exclude=()
    [ "$tool" = memcheck ] || cudnn=0 attention=flash exclude=("${skip_nccl[@]}")
    OPS_VOCAB_SMALL=1 OPS_VOCAB_CUDNN=$cudnn \
      bounded "$tool ops_vocab_test" "${SANITIZER_RUN_LIMIT:-150}" \
      "$logs/sanitizer_ops_$tool.log" \
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/ops_vocab_test" || fail=1
    # The sanitizer slows the GPU's work many times over, and every host wait for it is bounded
    # by ST_COMM_TIMEOUT (core/device.h): the run's own bound is the limit here.
    ST_COMM_TIMEOUT=${SANITIZER_RUN_LIMIT:-150} ST_CUDA_ATTENTION=$attention \
      bounded "$tool d6 on 2 ranks ($attention)" "${SANITIZER_RUN_LIMIT:-150}" \
      "$logs/sanitizer_d6_$tool.log" \
      "$mpirun_sh" 2 "$bin/nccl-hostid" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "${exclude[@]}" "$st" train --model d6 --device cuda --data-train "$data/bytes_train_*.bin" \
        --steps 3 --micro-batch 2 --dp-shard 2 --zero 3 --param-dtype bf16 --reduce-dtype bf16 || fail=1
  done
  return $fail
}

# ---- the sections asked for, in order ---------------------------------------------------------

# A summary is written at each section's start and end, so a command killed on the way still
# brings back what it did ($OUT/summary.txt, $OUT/suite.log).
for si in "${!sections[@]}"; do
  section=${sections[$si]}
  echo "== $section"
  section_start=$(now)
  left=$((suite_end - section_start))
  if [ "$left" -lt 20 ]; then
    say "FAIL $section: not run: $left s of SUITE_BUDGET left"
    summary+=("$section: NOT RUN (budget spent)")
    failed "not run: the command's budget was spent"
    status=1
    write_summary 0
    continue
  fi
  section_end=$((section_start + ${bound[$section]} * scale))
  [ "$section_end" -le "$suite_end" ] || section_end=$suite_end
  say "$section: up to $((section_end - section_start)) s"
  current=$section
  write_summary 0
  "section_$section"
  rc=$?
  current=
  if [ "$rc" -eq 0 ]; then
    summary+=("$section: passed ($(($(now) - section_start)) s)")
    say "$section: passed ($(($(now) - section_start)) s)"
  else
    summary+=("$section: FAILED ($(($(now) - section_start)) s)")
    say "$section: FAILED ($(($(now) - section_start)) s)"
    status=1
    if [ "$section" = preflight ] && [ "$rc" -eq 1 ]; then
      not_run_rest "preflight failed"
      write_summary 0
      break
    fi
  fi
  write_summary 0
done
section=
ended=1
exit "$status"
