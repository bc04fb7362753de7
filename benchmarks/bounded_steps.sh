#!/usr/bin/env bash
# bounded_steps.sh - sourced by gpu_bench.sh: each step of the benchmark under `timeout -k` in a
# process session of its own, and whatever of that session outlives the step killed. Open MPI
# puts each rank in a process group of its own, out of reach of timeout's signals, so a rank
# whose mpirun was killed would run on holding the GPU. Uses the caller's $work (scratch),
# $KILL_AFTER (timeout's KILL grace), $PROG (the messages' name), $step (the step's name) and
# fd 3 (the console, whatever a step's redirections took); sets $child while a step runs.

# shellcheck disable=SC2154 # $work, $KILL_AFTER, $PROG and $step are the caller's (above)
child= # the step in flight: a `setsid timeout` leading a session of its own
has_setsid=$(command -v setsid) # util-linux; without it, no sweep of what a step left

# gone PID: PID has ended (no such process, or a zombie).
gone() {
  local line fields
  { read -r line < "/proc/$1/stat"; } 2> "$work/.proc_err" || return 0
  read -r -a fields <<< "${line##*) }"
  [ "${fields[0]}" = Z ]
}

# session_pids SID: the live processes of session SID (from /proc, no fork per process).
session_pids() {
  local f line fields
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2> "$work/.proc_err" || continue
    read -r -a fields <<< "${line##*) }" # state ppid pgrp session ...
    if [ "${fields[3]:-}" = "$1" ] && [ "${fields[0]}" != Z ]; then
      f=${f#/proc/}
      echo "${f%/stat}"
    fi
  done
}

# sweep_session SID: KILL to what is left of session SID (a rank in a process group of its own,
# a compile worker), then up to 5 s for it to be gone; says so on the console (fd 3, whatever
# the caller redirected) and in sweeps.log (packed with the logs), never in the step's own log.
sweep_session() {
  local pids i
  mapfile -t pids < <(session_pids "$1")
  [ "${#pids[@]}" -gt 0 ] || return 0
  echo "$PROG: killed ${#pids[@]} process(es) left by ${step:-the step}: ${pids[*]}" |
    tee -a "$work/sweeps.log" >&3
  kill -s KILL "${pids[@]}" 2>> "$work/.proc_err"
  for ((i = 0; i < 50; i++)); do
    [ -z "$(session_pids "$1")" ] && return 0
    sleep 0.1
  done
  echo "$PROG: still there 5 s after KILL: $(session_pids "$1" | tr '\n' ' ')" |
    tee -a "$work/sweeps.log" >&3
}

# bounded SECS CMD...: CMD under `timeout -k` (TERM after SECS, KILL KILL_AFTER later) in a
# session of its own, waited for (a TERM to this script is handled at once: stop); its status,
# 124 or 137 when cut. What is left of the session afterwards is killed (sweep_session). $step
# names it for the messages. The GPU suite bounds its runs the same way (tests/gpu/suite_runs.sh:
# `timeout -k` in the background, waited for, TERM to its group on a stop, then KILL); its
# helpers are not shared, being bound to the suite's sections, summary and traps, and it has no
# sweep of the session (its mpirun wrapper's bounds leave mpirun the time to end its ranks).
bounded() {
  local secs=$1 rc
  shift
  [ "$secs" -ge 1 ] || return 124 # `timeout 0` would be no limit at all
  if [ -n "$has_setsid" ]; then
    setsid timeout -k "$KILL_AFTER" "$secs" "$@" &
  else
    timeout -k "$KILL_AFTER" "$secs" "$@" &
  fi
  child=$!
  wait "$child" 2>> "$work/.wait_err" # not bash's "Killed" line in CMD's log
  rc=$?
  [ -z "$has_setsid" ] || sweep_session "$child"
  child=
  return "$rc"
}
