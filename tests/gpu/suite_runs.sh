# shellcheck shell=bash disable=SC2154  # the suite's settings: set by run_gpu_suite.sh
# suite_runs.sh - sourced by tests/gpu/run_gpu_suite.sh: its output (stamped lines, capped
# excerpts, $OUT/suite.log), the summary rewritten under $OUT as it goes, the runs under their
# bounds (each in its own process group, waited on so that a TERM stops it at once), and the
# suite's end (the logs packed, the verdict) however it comes. Installs the EXIT, TERM and INT
# traps.

# ---- output ---------------------------------------------------------------------------------

# Where the device tool sets OUT, the suite's output goes to $OUT/suite.log too, as it is
# printed. The tee ignores TERM and INT (it ends when the suite does, after the summary) and
# keeps writing the file where the console's pipe breaks (-p).
outdir=
tee_pid=
if [ -n "${OUT:-}" ] && mkdir -p "$OUT"; then
  outdir=$OUT
  exec > >(trap '' TERM INT; exec tee -p "$outdir/suite.log") 2>&1
  tee_pid=$!
fi

now() { date +%s; }
# say TEXT...: a progress line, stamped with the seconds since the start.
say() { printf '[%4d s] %s\n' "$(($(now) - suite_start))" "$*"; }
# excerpt LOG: the last 1,500 bytes of LOG, indented, so a failure prints a bounded amount.
excerpt() {
  echo "    --- last 1500 bytes of ${1#"$logs"/}:"
  tail -c 1500 "$1" | sed 's/^/    /'
  echo
}
# failed WHAT: a failure for the summary (200 characters at most).
failed() { failures+=("${section:-suite}: ${1:0:200}"); }
# why RC [SECS WANT]: the words after a run's status. timeout's 124 (137 after its KILL) is a
# hang where the run had its whole bound (WANT seconds), and a cut where the section's end (or
# the budget) left it SECS < WANT; 200 is bounded's "not started".
why() {
  case $1 in
    124 | 137)
      if [ -n "${3:-}" ] && [ "$2" -lt "$3" ]; then
        echo "exit $1: cut after $2 s by the section's end (its own bound: $3 s)"
      else
        echo "exit $1: timed out${2:+ after $2 s}"
      fi ;;
    200) echo "not started: the section's time is spent" ;;
    *) echo "exit $1" ;;
  esac
}
version() {
  if [ -f "$bundle/version.txt" ]; then
    head -c 80 "$bundle/version.txt"
  else
    echo "no version.txt"
  fi
}

# ---- summary --------------------------------------------------------------------------------

# not_run_rest WHY: the sections after the current one, reported not run.
not_run_rest() {
  local s
  for s in "${sections[@]:si+1}"; do summary+=("$s: NOT RUN ($1)"); done
  si=${#sections[@]}
}
# summary_lines FINAL: the summary. Before the end (FINAL 0) it names the section running and
# those not yet started, and has no verdict.
summary_lines() {
  local n=${#failures[@]} shown=0 f s partial=
  [ "$1" = 1 ] || partial=" (partial: written while the command ran)"
  echo "== summary$partial: bundle $(version), $(($(now) - suite_start)) s of SUITE_BUDGET $budget"
  for s in "${summary[@]}"; do echo "$s"; done
  if [ "$1" != 1 ]; then
    [ -z "$current" ] || echo "$current: RUNNING (started at $((section_start - suite_start))" \
      "s, bound $((section_end - section_start)) s${running:+; in flight: $running})"
    for s in "${sections[@]:si+1}"; do echo "$s: not yet started"; done
  fi
  for f in "${failures[@]}"; do
    shown=$((shown + 1))
    [ "$shown" -le 30 ] && echo "  FAIL $f"
  done
  [ "$n" -le 30 ] || echo "  ... and $((n - 30)) more failures (logs)"
  if [ "$1" != 1 ]; then
    echo "verdict: none yet (if no later summary came, the command was killed here:" \
      "suite.log has what it printed)"
  elif [ "$status" -eq 0 ]; then
    echo "verdict: passed"
  else
    echo "verdict: FAILED ($n failures)"
  fi
}
# write_summary FINAL: the summary into the logs and, where OUT is set, $OUT/summary.txt.
write_summary() {
  summary_lines "$1" > "$logs/summary.txt"
  [ -z "$outdir" ] || { cp "$logs/summary.txt" "$outdir/.summary.tmp" &&
    mv -f "$outdir/.summary.tmp" "$outdir/summary.txt"; }
}

# ---- runs -----------------------------------------------------------------------------------

# limit SECONDS: SECONDS (times SUITE_TIME_SCALE), but not past the section's end.
limit() {
  local want=$(($1 * scale)) left=$((section_end - $(now)))
  [ "$left" -lt "$want" ] && want=$left
  echo "$want"
}
# gone PID: PID has ended (no such process, or a zombie).
gone() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>&1) || return 0
  [ "${state:0:1}" = Z ]
}
# wait_gone PID TENTHS: waits up to TENTHS tenths of a second for PID to end.
wait_gone() {
  local i
  for ((i = 0; i < $2; i++)); do
    gone "$1" && return 0
    sleep 0.1
  done
  return 1
}
# stop_child: ends the run in flight: TERM to its process group (timeout passes it on, and a
# test script ends its own run in flight), then after up to 3 s KILL to what is left of it.
stop_child() {
  local pid=$child
  [ -n "$pid" ] || return 0
  child=
  kill -s TERM -- "-$pid" 2>> "$logs/stops.log" || kill -s TERM "$pid" 2>> "$logs/stops.log"
  wait_gone "$pid" 30
  kill -s KILL -- "-$pid" 2>> "$logs/stops.log"
  return 0
}
# waited LOG CMD...: CMD (a `timeout ...`, through `env` where it needs variables set) in the
# background, its output in LOG, waited for: a signal to the suite is handled at once
# (stopped), not when CMD ends.
waited() {
  local log=$1 rc
  shift
  "$@" > "$log" 2>&1 &
  child=$!
  wait "$child"
  rc=$?
  child=
  return "$rc"
}
# not_started NAME: says and records that NAME could not start, its section's time spent.
not_started() {
  say "FAIL $1: not started, the section's time is spent"
  failed "$1: not started, the section's time is spent"
}
# bounded NAME SECONDS LOG CMD...: CMD under `timeout` (limit SECONDS), output to LOG, then one
# line: ok, or FAIL with the log's end; the status is CMD's, or 200 where the section's time
# was spent before it could start. The partial summary is written before and after.
bounded() {
  local name=$1 want=$(($2 * scale)) log=$3 secs rc start
  secs=$(limit "$2")
  shift 3
  start=$(now)
  if [ "$secs" -le 0 ]; then
    not_started "$name"
    return 200
  fi
  running=$name
  write_summary 0
  waited "$log" timeout -k 10 "$secs" "$@"
  rc=$?
  running=
  if [ "$rc" -eq 0 ]; then
    local last
    last=$(tail -n 1 "$log" | cut -c 1-160)
    say "ok   $name ($(($(now) - start)) s)${last:+: $last}"
  else
    local what
    what="$name ($(($(now) - start)) s, $(why "$rc" "$secs" "$want"))"
    say "FAIL $what"
    excerpt "$log"
    failed "$what"
  fi
  write_summary 0
  return "$rc"
}
# run_script NAME SECONDS CMD...: a test script under `timeout` (limit SECONDS), its lines
# passed on stamped as they come (80 at most, 300 characters each; all of it in NAME.log) and
# its FAIL lines kept for the summary. Not started with under 30 s left (status 200). Its runs
# stop 15 s before its own bound (train_runs.sh's TRAIN_RUN_DEADLINE, the timed mpirun.sh's
# ST_SUITE_DEADLINE), which leaves it the time to check what ran and say so.
run_script() {
  local name=$1 want=$(($2 * scale)) secs rc start log=$logs/$1.log fd stamper
  secs=$(limit "$2")
  shift 2
  start=$(now)
  if [ "$secs" -lt 30 ]; then
    not_started "$name"
    return 200
  fi
  say "$name: up to $secs s"
  exec {fd}> >(tee "$log" | stamp 80)
  stamper=$!
  running=$name
  write_summary 0
  TRAIN_RUN_DEADLINE=$((start + secs - 15)) ST_SUITE_DEADLINE=$((start + secs - 15)) \
    timeout -k 10 "$secs" "$@" >&"$fd" 2>&1 &
  child=$!
  exec {fd}>&-
  wait "$child"
  rc=$?
  child=
  running=
  wait_gone "$stamper" 50 # the script's last lines
  if [ "$rc" -eq 0 ]; then
    say "ok   $name ($(($(now) - start)) s)"
  else
    say "FAIL $name ($(($(now) - start)) s, $(why "$rc" "$secs" "$want"))"
    local lines
    mapfile -t lines < <(grep -E '^FAIL' "$log" | sed 's/; the end of .*//' | head -n 8)
    local line
    for line in "${lines[@]}"; do failed "$name: $line"; done
    [ "${#lines[@]}" -gt 0 ] || failed "$name ($(why "$rc" "$secs" "$want"))"
  fi
  write_summary 0
  return "$rc"
}
# stamp MAX: passes stdin on, each line stamped and cut to 300 characters, MAX lines at most.
stamp() {
  local line n=0
  while IFS= read -r line; do
    n=$((n + 1))
    [ "$n" -le "$1" ] && say "  ${line:0:300}"
    [ "$n" -eq $(($1 + 1)) ] && say "  ... (more in the log)"
  done
  return 0
}

# ---- the end --------------------------------------------------------------------------------

# pack_logs: calibrate's files and the text of the logs (no data, checkpoints or exports) into
# $OUT; of a log of 4 MiB or more, its last MiB (NAME.last-1MiB). At most 20 s.
pack_logs() {
  if [ -z "$outdir" ]; then
    echo "logs: $logs"
    return
  fi
  local f size list=$logs/.packed name=logs.tar.xz how=-cJf rc
  for f in gpu_shared.hw gpu_shared.txt validation.md; do
    [ ! -f "$logs/$f" ] || cp "$logs/$f" "$outdir/$f"
  done
  while IFS= read -r f; do
    size=$(stat -c %s "$logs/$f") || continue
    if [ "$size" -lt $((4 << 20)) ]; then
      echo "$f"
    elif tail -c $((1 << 20)) "$logs/$f" > "$logs/$f.last-1MiB"; then
      echo "$f.last-1MiB"
    fi
  done < <(cd "$logs" && find . -type f \( -name '*.log' -o -name '*.jsonl' -o -name '*.txt' \
    -o -name '*.md' -o -name '*.hw' -o -name '*.json' \) | sort) > "$list"
  [ -n "$(command -v xz)" ] || { name=logs.tar.gz; how=-czf; }
  XZ_OPT='-3 -T0' timeout -k 2 20 tar "$how" "$outdir/$name" -C "$logs" -T "$list"
  rc=$?
  case $rc in
    0) echo "logs: \$OUT/$name" ;;
    124 | 137) echo "logs: packing cut after 20 s: \$OUT/$name holds a part (all in $logs)" ;;
    *) echo "logs: tar exited $rc: \$OUT/$name may hold a part (all in $logs)" ;;
  esac
}
# Called on the way out, whatever happened: an end that is neither the planned one nor a stop
# by a signal (stopped) is a crash of the suite itself; the summary, then the logs packed for
# $OUT.
finish() {
  local rc=$?
  trap - EXIT
  trap : TERM INT # the summary is written whatever comes now
  stop_child
  if [ "$ended" != 1 ]; then
    status=1
    say "CRASHED: the suite itself ended unexpectedly (exit $rc) in ${section:-its set-up}"
    local took=$(($(now) - section_start))
    summary+=("${section:-suite}: CRASHED (exit $rc after $took s: see the lines above)")
    failures+=("${section:-suite}: the suite itself ended unexpectedly (exit $rc)")
    not_run_rest "the suite crashed"
  fi
  current=
  write_summary 1
  cat "$logs/summary.txt"
  pack_logs
  if [ -n "$tee_pid" ]; then # its last lines out before the command ends
    exec >&- 2>&-
    wait_gone "$tee_pid" 50
  fi
  exit "$status"
}
# A TERM or INT (the device tool's limit, a person): the run in flight is ended at once, the
# section reported stopped, and the summary written (finish).
stopped() {
  trap : TERM INT
  local during=${running:+, during $running (ended)}
  stop_child
  say "stopped by SIG$1 in ${section:-the set-up}$during"
  status=1
  summary+=("${section:-suite}: STOPPED by SIG$1 after $(($(now) - section_start)) s$during")
  failures+=("${section:-suite}: stopped by SIG$1$during")
  not_run_rest "the suite was stopped"
  ended=1
  exit 1
}
trap finish EXIT
trap 'stopped TERM' TERM
trap 'stopped INT' INT
