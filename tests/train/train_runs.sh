# shellcheck shell=bash disable=SC2154  # shardtrain, prepare, mpirun_sh: set by the sourcing test
# train_runs.sh - sourced by the end-to-end training tests. Needs $shardtrain, $prepare and
# $mpirun_sh; prepares the byte data in $work (with the flags of prepare_bytes.py in
# $train_data_flags, when the sourcing test sets it) and defines
#   run NAME RANKS ARGS...
# which trains the tiny GPT 10 steps (the flags in $common, then ARGS) on RANKS ranks and
# writes $work/NAME.jsonl (metrics), $work/NAME.safetensors (export) and $work/NAME.log; a
# run that exits non-zero fails the test, printing its log. And fail MESSAGE: prints
# "FAIL: MESSAGE" and ends the test with exit 1. And, to signal a run's processes:
#   mpirun_pid TEXT        the pid of the one mpirun (or mpiexec, orterun, prterun) whose
#                          command line holds TEXT
#   rank_pid TEXT RANK     the pid of world rank RANK's shardtrain whose command line holds TEXT
# (read from /proc, not with pgrep, whose lookup sent no SIGUSR1 on the GPU machine, 2026-11-29);
# each prints nothing, and a line saying why on stderr, unless exactly one process matches.
# Set by the GPU suite (tests/gpu/run_gpu_suite.sh); unset, as in `bazel test`, none applies:
#   TRAIN_RUN_LOG_DIR       $work is made under it (where TEST_TMPDIR is unset), so the runs'
#                           logs are among the suite's
#   TRAIN_RUN_TIMEOUT       each run is stopped after this many seconds (`timeout`: exit 124)
#   TRAIN_RUN_DEADLINE      and no later than this time (seconds since 1970); a run is not
#                           started past it, and one it cuts says so
#   TRAIN_RUN_KEEP_GOING=1  a failed run prints "FAIL NAME (N s, exit X)" and the last 1,500
#                           bytes of its log, is recorded in $runs_failed and the test goes on
#                           (run returns 1); the test then exits 1 whatever it found, naming
#                           the failed runs. Each run that passes prints "ok   NAME (N s)".
# Under TRAIN_RUN_TIMEOUT or TRAIN_RUN_DEADLINE a run goes to the background and is waited for,
# and a TERM or INT to the test ends the run in flight ($train_run_pid: a `timeout`, which leads
# a process group of its own, so the signal to the test's group does not reach it) before the
# test exits, so no run outlives a test the suite stopped. A sourcing test that starts such a
# bounded job itself sets train_run_pid to it while it runs (checkpoint_async_test.sh's held).
if [ -n "${TEST_TMPDIR:-}" ]; then
  work=$TEST_TMPDIR
elif [ -n "${TRAIN_RUN_LOG_DIR:-}" ]; then
  work=$(mktemp -d -p "$TRAIN_RUN_LOG_DIR" "$(basename "$0" .sh).XXXXXX") || exit 1
else
  work=$(mktemp -d) || exit 1
fi
# shellcheck disable=SC2086 # the flags are words
python3 "$prepare" --out-dir "$work/data" ${train_data_flags:-} > /dev/null || exit 1
common=(train --model tiny --data-train "$work/data/bytes_train_*.bin" --steps 10 --lr 3e-3
        --warmup 3 --min-lr 3e-4 --seed 7)
runs_failed=()
train_run_pid=

run() {
  local name=$1 ranks=$2 start=$SECONDS rc cut=
  shift 2
  if [ -z "${TRAIN_RUN_TIMEOUT:-}${TRAIN_RUN_DEADLINE:-}" ]; then
    # shellcheck disable=SC2086 # both variables are lists of words on purpose
    "$mpirun_sh" "$ranks" ${TRAIN_RUN_WRAPPER:-} "$shardtrain" "${common[@]}" \
      --metrics "$work/$name.jsonl" --export "$work/$name.safetensors" "$@" \
      ${TRAIN_RUN_FLAGS:-} > "$work/$name.log" 2>&1
    rc=$?
  else
    local secs=${TRAIN_RUN_TIMEOUT:-86400}
    if [ -n "${TRAIN_RUN_DEADLINE:-}" ] && [ $((TRAIN_RUN_DEADLINE - $(date +%s))) -lt "$secs" ]
    then
      secs=$((TRAIN_RUN_DEADLINE - $(date +%s)))
      cut=1
    fi
    if [ "$secs" -le 0 ]; then
      echo "not started: past TRAIN_RUN_DEADLINE" > "$work/$name.log"
      run_failed "$name" 124 "not started: past TRAIN_RUN_DEADLINE"
      return 1
    fi
    # shellcheck disable=SC2086 # both variables are lists of words on purpose
    timeout -k 10 "$secs" "$mpirun_sh" "$ranks" ${TRAIN_RUN_WRAPPER:-} "$shardtrain" \
      "${common[@]}" --metrics "$work/$name.jsonl" --export "$work/$name.safetensors" "$@" \
      ${TRAIN_RUN_FLAGS:-} > "$work/$name.log" 2>&1 &
    train_run_pid=$!
    wait "$train_run_pid"
    rc=$?
    train_run_pid=
    if [ -n "$cut" ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }; then
      run_failed "$name" "$rc" "exit $rc: cut at TRAIN_RUN_DEADLINE after $secs s"
      return 1
    fi
  fi
  if [ "$rc" -ne 0 ]; then
    run_failed "$name" "$rc"
    return 1
  fi
  [ "${TRAIN_RUN_KEEP_GOING:-0}" != 1 ] || echo "ok   $name ($((SECONDS - start)) s)"
}

# run_failed NAME STATUS [WHY]: ends the test, or with TRAIN_RUN_KEEP_GOING=1 records the
# failure (WHY: the words after the time; by default the exit status, 124 and 137 as a time-out).
run_failed() {
  if [ "${TRAIN_RUN_KEEP_GOING:-0}" != 1 ]; then
    echo "FAIL: $1 exited non-zero"; cat "$work/$1.log"; exit 1
  fi
  local what="exit $2"
  [ "$2" -ne 124 ] && [ "$2" -ne 137 ] || what="exit $2: timed out"
  echo "FAIL $1 ($((SECONDS - start)) s, ${3:-$what}); the end of $(basename "$work")/$1.log:"
  tail -c 1500 "$work/$1.log"
  echo
  runs_failed+=("$1")
}

# With TRAIN_RUN_KEEP_GOING=1 a test that had a failed run fails, whatever its own checks said.
runs_verdict() {
  local rc=$?
  if [ "${#runs_failed[@]}" -gt 0 ]; then
    echo "FAIL: ${#runs_failed[@]} run(s) failed: ${runs_failed[*]}"
    exit 1
  fi
  exit "$rc"
}
[ "${TRAIN_RUN_KEEP_GOING:-0}" != 1 ] || trap runs_verdict EXIT

# A TERM or INT (the suite stopping the test): the run in flight is ended, then the test.
runs_stopped() {
  local pid=$train_run_pid
  trap '' TERM INT # once: timeout passes its signal on to the test and to its group both
  train_run_pid=
  if [ -n "$pid" ]; then
    kill -s TERM -- "-$pid" 2>> "$work/stops.log" || kill -s TERM "$pid" 2>> "$work/stops.log"
  fi
  echo "FAIL: stopped by a signal${pid:+ (the run in flight ended)}"
  exit 143
}
[ -z "${TRAIN_RUN_TIMEOUT:-}${TRAIN_RUN_DEADLINE:-}" ] || trap runs_stopped TERM INT

fail() { echo "FAIL: $*"; exit 1; }

# The pids, one a line, of this machine's processes named one of the |-separated names $1
# (/proc/PID/comm: the executable's or the script's name) whose command line holds the text $2
# and whose environment holds the line $3 (when given). A process that ends meanwhile is left
# out quietly.
pids_named() {
  local p comm
  for p in /proc/[0-9]*; do
    comm=$(cat "$p/comm" 2>/dev/null) || continue
    [[ "|$1|" == *"|$comm|"* ]] || continue
    case "$( (tr '\0' ' ' < "$p/cmdline") 2>/dev/null)" in *"$2"*) ;; *) continue ;; esac
    [ -z "${3:-}" ] || ( (tr '\0' '\n' < "$p/environ") 2>/dev/null | grep -qxF -- "$3") || continue
    echo "${p#/proc/}"
  done
}

# The one pid pids_named finds, else nothing and a line on stderr.
one_pid() {
  local pids
  pids=$(pids_named "$@")
  if [ -z "$pids" ] || [ "$(wc -l <<< "$pids")" -ne 1 ]; then
    echo "no single $1 process for '$2'${3:+ with $3} (found: ${pids:-none})" >&2
    return 1
  fi
  echo "$pids"
}

# Open MPI 4's mpirun keeps its name; Open MPI 5's runs as prterun.
mpirun_pid() { one_pid "mpirun|mpiexec|orterun|prterun" "$1"; }
rank_pid() { one_pid shardtrain "$1" "OMPI_COMM_WORLD_RANK=$2"; }
