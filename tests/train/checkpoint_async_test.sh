#!/usr/bin/env bash
# Checkpoints saved in the background (--ckpt-async, engine/checkpoint/ckpt_writer.h) are the
# blocking saves' checkpoints, byte for byte, and training goes on while they are written:
#   - on 1 rank and on 4 (2 replicas x tp 2, ZeRO-1, whose replicas write nothing), with
#     --ckpt-every 3 and --keep 2: the checkpoint directory, the metrics and the export equal
#     those of the same run saving blocking;
#   - with each write held back 1.5 s before it starts (ST_CKPT_TEST_DELAY_MS), step_5 is
#     committed after step 8 or later (a save committed at the first step boundary after it
#     would say step 6), step_10 after the last, and rank 0's step lines of steps 6-10 exist;
#     the snapshot is what was written: a run resumed from that step_5 ends with the export of
#     the run that never stopped;
#   - SIGUSR1 while a write is in flight: the run stops after the step, commits the save in
#     flight and the stop's own (both complete), exits 138 and says where to go on from;
#   - SIGUSR1 while the last step's save is in flight: caught, not fatal: the run finishes
#     (exit 0) with that checkpoint complete;
#   - a write that fails in the background (its .step_2.tmp removed before the files are
#     written): every rank exits 1 within the time limit with one error line naming the
#     directory, and no step_2 appears.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"
# shellcheck source=tests/train/each_rank.sh
. "$(dirname "$0")/each_rank.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
check() { # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
untimed() { sed -E 's/"tokens_per_s".*//' "$@"; }
same_run() { # same_run A B: the checkpoints, metrics and export of runs A and B are the same
  # (but for the lock file each job holds, which names its process)
  check "$1 and $2: the same checkpoint directories" diff -r -x .lock "$work/$1" "$work/$2"
  check "$1 and $2: the same metrics" test "$(untimed "$work/$1.jsonl")" = \
    "$(untimed "$work/$2.jsonl")"
  check "$1 and $2: the same export" cmp -s "$work/$1.safetensors" "$work/$2.safetensors"
}

saves=(--ckpt-every 3 --keep 2)
run blocking1 1 "${saves[@]}" --ckpt-dir "$work/blocking1"
run async1 1 "${saves[@]}" --ckpt-dir "$work/async1" --ckpt-async
same_run blocking1 async1
mesh=(--dp-replicate 2 --tp 2 --zero 1 --micro-batch 4)
run blocking4 4 "${mesh[@]}" "${saves[@]}" --ckpt-dir "$work/blocking4"
run async4 4 "${mesh[@]}" "${saves[@]}" --ckpt-dir "$work/async4" --ckpt-async
same_run blocking4 async4
check "async4: --keep 2 left step_9 and step_10 (found: $(ls "$work/async4" | tr '\n' ' '))" \
  test "$(ls "$work/async4" | tr '\n' ' ')" = "step_10 step_9 "

# Training goes on while a save is written.
ST_CKPT_TEST_DELAY_MS=1500 run slow 1 --ckpt-every 5 --ckpt-dir "$work/slow" --ckpt-async
after=$(sed -nE 's|.*checkpoint .*/slow/step_5: .* committed after step ([0-9]+);.*|\1|p' \
  "$work/slow.log")
check "slow: step_5 was committed after later steps ran (after step '$after')" \
  test "${after:-0}" -ge 8
check "slow: step_10 was committed after the last step" \
  grep -qE "checkpoint .*/slow/step_10: .* committed after step 10;" "$work/slow.log"
check "slow: the step lines of steps 6-10" \
  test "$(grep -cE '^step +([6-9]|10)/10 ' "$work/slow.log")" -eq 5
run resumed 1 --ckpt-dir "$work/slow" --resume-from "$work/slow/step_5" \
  --ckpt-every 5 --ckpt-async
check "resumed from the background save of step 5: the export of the run that never stopped" \
  cmp -s "$work/resumed.safetensors" "$work/slow.safetensors"

# held NAME STEP DELAY_MS ARGS...: trains NAME on 2 ranks (ZeRO-3) saving in the background to
# $work/NAME, each write held back DELAY_MS ms; returns once the save of STEP has begun or the
# job has ended, the job running in the background ($job, log $work/NAME.log). The job's bound,
# 60 s, is cut to what is left before TRAIN_RUN_DEADLINE (the GPU suite; train_runs.sh), and
# past it the job is not started (its status 124); while it runs it is train_run_pid, which a
# TERM to the test ends (train_runs.sh). With HELD_PER_RANK=1 each rank runs under each_rank.sh's
# per_rank (not where a signal is sent: mpirun passes it to the wrapper, not to the rank).
held() {
  local name=$1 step=$2 delay=$3 secs=60 wrap=()
  shift 3
  [ -z "${HELD_PER_RANK:-}" ] || wrap=("${per_rank[@]}")
  if [ -n "${TRAIN_RUN_DEADLINE:-}" ] && [ $((TRAIN_RUN_DEADLINE - $(date +%s))) -lt "$secs" ]; then
    secs=$((TRAIN_RUN_DEADLINE - $(date +%s)))
  fi
  if [ "$secs" -le 0 ]; then
    echo "FAIL $name: not started: past TRAIN_RUN_DEADLINE" | tee "$work/$name.log"
    (exit 124) &
    job=$!
    return
  fi
  ST_CKPT_TEST_DELAY_MS=$delay timeout "$secs" "$mpirun_sh" 2 "${wrap[@]}" "$shardtrain" \
    "${common[@]}" --dp-shard 2 --zero 3 --micro-batch 4 --ckpt-async --ckpt-dir "$work/$name" \
    "$@" > "$work/$name.log" 2>&1 &
  job=$!
  train_run_pid=$job
  for _ in $(seq 600); do
    [ -d "$work/$name/.step_$step.tmp" ] && break
    kill -0 "$job" 2>> "$work/held_wait.log" || break  # ended before that save began
    sleep 0.1
  done
}
# ended: waits for $job; its exit status becomes $rc.
ended() {
  wait "$job"
  rc=$?
  train_run_pid=
}
# usr1 NAME: SIGUSR1 to NAME's mpirun, named in the log (on the GPU machine, 2026-11-29, the
# signal sent this way never reached the ranks, and mpirun did not say it forwarded one).
usr1() {
  local pid
  pid=$(mpirun_pid "--ckpt-dir $work/$1") || return 1
  echo "SIGUSR1 to pid $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" | cut -c 1-100)"
  kill -USR1 "$pid"
}

# SIGUSR1 while step_2's write is held back: both saves complete, exit 138.
held usr1 2 1000 --steps 100000 --lr-schedule constant --ckpt-every 2
usr1 usr1
ended
stopped=$(sed -nE 's/.*warn: stopped by SIGUSR1 after step ([0-9]+) of 100000: checkpoint .*/\1/p' \
  "$work/usr1.log")
check "SIGUSR1 during a background write: exit 138 (got $rc)" test "$rc" -eq 138
check "... after step '$stopped', at or past step 2" test "${stopped:-0}" -ge 2
check "... step_2 and the stop's step_$stopped complete" \
  test -e "$work/usr1/step_2/DONE" -a -e "$work/usr1/step_$stopped/DONE"

# SIGUSR1 while the save after the last step is written: the run ends as it would have.
held last 3 1000 --steps 3
usr1 last
ended
check "SIGUSR1 during the last save's write: exit 0 (got $rc)" test "$rc" -eq 0
check "... and step_3 complete" test -e "$work/last/step_3/DONE"

# A write that fails in the background: its directory is gone before the files are written.
HELD_PER_RANK=1 held gone 2 1000 --ckpt-every 2
check "the background save's directory could be removed while its write waited" \
  rmdir "$work/gone/.step_2.tmp"
ended
ranks_said "a save that cannot be committed: each rank exits 1 with one error line naming the \
directory" "$(cat "$work/gone.log")" 2 1 "error: shardtrain train: .*$work/gone/\.step_2\.tmp" \
  "$rc" || fail=1
check "... and no step_2" test ! -e "$work/gone/step_2"

[ $fail -eq 0 ] && echo "checkpoint_async_test: passed" || echo "checkpoint_async_test: FAILED"
exit $fail
