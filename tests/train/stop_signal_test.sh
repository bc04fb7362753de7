#!/usr/bin/env bash
# A run stopped by a signal between steps (engine/train/stop_request.h) checkpoints and exits
# with the shell's code for the signal, on every rank, and goes on bit-identically:
#   - SIGUSR1 to mpirun, which forwards it to every rank (2 ranks, ZeRO-3): exit 138, a
#     checkpoint of the step it stopped after (the only one: --ckpt-every is past the run), a
#     line saying so on rank 0, the metrics of every step trained, no export (nor a summary line
#     naming one); --resume to two
#     steps further equals a run that never stopped (metrics and export);
#   - SIGTERM to rank 1 alone: both ranks stop after the same step (they agree between steps;
#     rank 0 alone in the next step's collectives would wait out the time limit): exit 143, one
#     complete checkpoint of both ranks' files;
#   - SIGTERM without --ckpt-dir: exit 143 and a line saying no checkpoint was written; with
#     --log-every 1000 the step line of the step it stopped after is printed all the same;
#   - a second signal while the stop's checkpoint is being written ends the process at once;
#   - a signal while a due checkpoint (--ckpt-every) is written stops the run on it: no step
#     more, no second save;
#   - a signal while the last step's checkpoint is written stops nothing: the run finishes with
#     its export and exit code 0, and a warning says the signal came too late to stop it.
# The learning rate is constant (--lr-schedule constant), so the steps do not depend on --steps
# and a run of 100000 steps stopped at step K continues as a run of K + 2 steps does.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"
common+=(--lr-schedule constant --dp-shard 2 --zero 3 --micro-batch 4)
fail=0
check() { # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# start NAME RANKS ARGS...: trains NAME (metrics $work/NAME.jsonl, log $work/NAME.log) on RANKS
# ranks for up to 100000 steps, in the background ($job).
start() {
  local name=$1 ranks=$2
  shift 2
  timeout 60 "$mpirun_sh" "$ranks" "$shardtrain" "${common[@]}" --steps 100000 \
    --metrics "$work/$name.jsonl" "$@" > "$work/$name.log" 2>&1 &
  job=$!
}
# signal_after_steps NAME SIGNAL TARGET: once NAME has recorded three steps, sends SIGNAL to
# TARGET (mpirun, or rank N's process), whose pid becomes $pid.
signal_after_steps() {
  local name=$1 signal=$2 target=$3
  pid=
  for _ in $(seq 600); do
    [ "$(cat "$work/$name.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
    sleep 0.1
  done
  if [ "$target" = mpirun ]; then
    pid=$(mpirun_pid "--metrics $work/$name.jsonl")
  else
    pid=$(rank_pid "--metrics $work/$name.jsonl" "$target")
  fi
  if [ -z "$pid" ]; then
    echo "FAIL: $name: no $target process to signal after three steps"
    kill -- "$job" 2>/dev/null
    wait "$job"
    cat "$work/$name.log"
    exit 1
  fi
  kill "-$signal" "$pid"
}
# stopped NAME RANKS SIGNAL TARGET ARGS...: start, then signal_after_steps; $rc is the job's
# exit status.
stopped() {
  local name=$1 ranks=$2 signal=$3 target=$4
  shift 4
  start "$name" "$ranks" "$@"
  signal_after_steps "$name" "$signal" "$target"
  wait "$job"
  rc=$?
}
# The names in directory $1 but the job's lock file (ckpt_dir_claim's .lock), sorted.
listing() { (cd "$1" && find . -mindepth 1 -maxdepth 1 ! -name .lock -printf '%f\n' | LC_ALL=C sort | tr '\n' ' '); }

# SIGUSR1 through mpirun.
stopped usr1 2 USR1 mpirun --ckpt-dir "$work/usr1" --ckpt-every 100000 \
  --export "$work/usr1.safetensors"
steps=$(wc -l < "$work/usr1.jsonl")
check "SIGUSR1: exit 138 (got $rc)" test "$rc" -eq 138
check "SIGUSR1: the checkpoint of step $steps is the directory's only entry (found: \
$(listing "$work/usr1"))" test "$(listing "$work/usr1")" = "step_$steps "
check "SIGUSR1: ... and complete" test -e "$work/usr1/step_$steps/DONE"
check "SIGUSR1: rank 0 says where it stopped and how to go on" grep -qF \
  "warn: stopped by SIGUSR1 after step $steps of 100000: checkpoint $work/usr1/step_$steps; the \
same command with --resume goes on from there; the export was not written" "$work/usr1.log"
check "SIGUSR1: no export" test ! -e "$work/usr1.safetensors"
check "SIGUSR1: ... and the summary names none" test -z "$(grep '^export: ' "$work/usr1.log")"
run usr1_resumed 2 --steps $((steps + 2)) --ckpt-dir "$work/usr1" --resume
run unstopped 2 --steps $((steps + 2))
check "SIGUSR1: the resumed run went on from step $steps" \
  grep -qF "resumed from $work/usr1/step_$steps: step $steps" "$work/usr1_resumed.log"
untimed() { sed -E 's/"tokens_per_s".*//' "$@"; }
check "SIGUSR1: the steps before the stop equal the never-stopped run's" \
  test "$(untimed "$work/usr1.jsonl")" = "$(head -n "$steps" "$work/unstopped.jsonl" | untimed)"
check "SIGUSR1: ... and so do the two after it" \
  test "$(untimed "$work/usr1_resumed.jsonl")" = "$(tail -n 2 "$work/unstopped.jsonl" | untimed)"
check "SIGUSR1: ... and the export" cmp -s "$work/usr1_resumed.safetensors" \
  "$work/unstopped.safetensors"

# SIGTERM to one rank.
stopped term1 2 TERM 1 --ckpt-dir "$work/term1" --ckpt-every 100000
steps=$(wc -l < "$work/term1.jsonl")
check "SIGTERM to rank 1: exit 143 (got $rc)" test "$rc" -eq 143
check "SIGTERM to rank 1: one complete checkpoint of both ranks, step $steps (found: \
$(listing "$work/term1") / $(listing "$work/term1/step_$steps" 2>&1))" \
  test "$(listing "$work/term1/step_$steps")" = \
  "DONE manifest.json rank_00000.safetensors rank_00001.safetensors "

# SIGTERM without a checkpoint directory, with step lines every 1000 steps: the run's last line
# is still the step it stopped after.
stopped nodir 2 TERM 0 --log-every 1000
steps=$(wc -l < "$work/nodir.jsonl")
check "SIGTERM without --ckpt-dir: exit 143 (got $rc)" test "$rc" -eq 143
check "SIGTERM without --ckpt-dir: says no checkpoint was written" grep -qF \
  "warn: stopped by SIGTERM after step $steps of 100000, without a checkpoint (no --ckpt-dir)" \
  "$work/nodir.log"
check "--log-every 1000: the one step line is the stopped step's, $steps (found: \
$(grep '^step ' "$work/nodir.log" | cut -c1-18 | tr '\n' ' '))" \
  test "$(grep '^step ' "$work/nodir.log" | cut -d'|' -f1 | tr -s ' ')" = "step $steps/100000 "

# A second signal while the stop's save runs ends the process at once: the save sleeps 30 s
# after writing the rank files (ST_CKPT_TEST_DELAY_MS), and the second SIGUSR1 (to mpirun, like
# the first) comes once rank 0's is there. The job ends long before the 30 s, and no checkpoint is completed.
ST_CKPT_TEST_DELAY_MS=30000 start twice 2 --ckpt-dir "$work/twice" --ckpt-every 100000
signal_after_steps twice USR1 mpirun
for _ in $(seq 600); do
  compgen -G "$work/twice/.step_*.tmp/rank_00000.safetensors" > /dev/null && break
  sleep 0.1
done
SECONDS=0
kill -USR1 "$pid"
wait "$job"
rc=$?
check "a second SIGUSR1 during the save ended the job within 10 s (took $SECONDS s, exit $rc)" \
  test "$SECONDS" -lt 10 -a "$rc" -ne 0 -a "$rc" -ne 124
check "... with no checkpoint completed (found: $(listing "$work/twice"))" \
  test -z "$(compgen -G "$work/twice/step_*")"

# signal_in_save NAME DIR STEP: once the save of step STEP has begun in DIR (its .step_STEP.tmp is
# there; the test delay holds it 2 s), sends SIGUSR1 to NAME's mpirun; $rc is the job's status.
signal_in_save() {
  local name=$1 dir=$2 step=$3
  for _ in $(seq 600); do
    [ -d "$dir/.step_$step.tmp" ] && break
    sleep 0.05
  done
  kill -USR1 "$(mpirun_pid "--metrics $work/$name.jsonl")"
  wait "$job"
  rc=$?
}

ST_CKPT_TEST_DELAY_MS=2000 start insave 2 --ckpt-dir "$work/insave" --ckpt-every 3
signal_in_save insave "$work/insave" 3
check "SIGUSR1 during step 3's due save: exit 138 (got $rc)" test "$rc" -eq 138
check "... stopped on it: step_3 alone, after 3 steps (found: $(listing "$work/insave"), \
$(wc -l < "$work/insave.jsonl") steps)" \
  test "$(listing "$work/insave")" = "step_3 " -a "$(wc -l < "$work/insave.jsonl")" -eq 3

ST_CKPT_TEST_DELAY_MS=2000 timeout 60 "$mpirun_sh" 2 "$shardtrain" "${common[@]}" --steps 3 \
  --ckpt-dir "$work/late" --export "$work/late.safetensors" --metrics "$work/late.jsonl" \
  > "$work/late.log" 2>&1 &
job=$!
signal_in_save late "$work/late" 3
check "SIGUSR1 during the last step's save: exit 0 (got $rc)" test "$rc" -eq 0
check "... the export written" test -s "$work/late.safetensors"
check "... and a warning that the run finished" grep -qF \
  "warn: SIGUSR1 came during the last step or after it: the run finished its 3 steps as if it \
had not (exit code 0)" "$work/late.log"

[ $fail -eq 0 ] && echo "stop_signal_test: passed" || echo "stop_signal_test: FAILED"
exit $fail
