# shellcheck shell=bash disable=SC2034  # output, rc, elapsed, fail: read by the sourcing test
# stuck_job.sh - sourced by timeout_test.sh and device_wait_timeout_test.sh, whose jobs have a
# collective that never finishes (timeout_skipper.c). Defines
#   stuck_job LIMIT_S COMMAND...  runs COMMAND under an outer `timeout` of LIMIT_S + 30 s; sets
#                                 $output (stdout and stderr), $rc and $elapsed (seconds)
#   check CONDITION MESSAGE       evaluates CONDITION; when false prints "FAIL: MESSAGE", sets
#                                 $fail
#   check_ended LIMIT_S           the job ended by itself, non-zero, within LIMIT_S seconds, and
#                                 no rank got past the stuck collective
fail=0

stuck_job() {
  local limit=$1 start
  shift
  start=$(date +%s)
  output=$(timeout $((limit + 30)) "$@" 2>&1)
  rc=$?
  elapsed=$(($(date +%s) - start))
}

check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }

check_ended() {
  check '[ $rc -ne 0 ]' "the job exited 0"
  check '[ $rc -ne 124 ]' "the job hung until the outer timeout"
  check "[ $elapsed -le $1 ]" "took ${elapsed}s, limit $1 s"
  check '! grep -q "returned from a collective" <<< "$output"' \
    "a rank got past the stuck collective"
}
