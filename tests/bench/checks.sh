# checks.sh - the assertions the benchmark's shell tests share (sourced). Each prints "ok: ..." or
# "FAIL: ..." with the output, and a failure sets fail=1; the test exits with $fail at its end.
# shellcheck shell=bash disable=SC2034  # fail: read by the tests that source this
fail=0

check() { # check NAME COMMAND...: the command must succeed
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    echo "ok: $name"
  else
    echo "FAIL: $name:"; echo "$out"; fail=1
  fi
}

# expect_error CODE PATTERN COMMAND...: exit CODE, exactly one line on stderr, matching PATTERN.
expect_error() {
  local code=$1 pattern=$2 err rc lines
  shift 2
  err=$("$@" 2>&1 > /dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne "$code" ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pattern" <<< "$err"; then
    echo "FAIL: $* -> exit $rc (want $code), $lines lines:"; echo "$err"; fail=1
  else
    echo "ok: exit $rc: $err"
  fi
}
