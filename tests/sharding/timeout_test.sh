#!/usr/bin/env bash
# The timeout path: one rank of three skips a collective. Every process must be gone, with a
# non-zero exit, within the timeout plus a few seconds, and the report must name the group,
# the op, the sequence number and the bytes of the collective that never finished.
set -uo pipefail
mpirun_sh=$1
skipper=$2
timeout_s=2
limit_s=$((timeout_s + 20))

start=$(date +%s)
output=$(ST_COMM_TIMEOUT=$timeout_s timeout $((limit_s + 30)) "$mpirun_sh" 3 "$skipper" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$output"
echo "exit code $rc after ${elapsed}s"

fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }
check '[ $rc -ne 0 ]' "the job exited 0"
check '[ $rc -ne 124 ]' "the job hung until the outer timeout"
check '[ $elapsed -le $limit_s ]' "took ${elapsed}s, limit ${limit_s}s"
check 'grep -q "collective timed out" <<<"$output"' "no timeout report"
check 'grep -q "group world" <<<"$output"' "report does not name the group"
check 'grep -q "op all_reduce, seq 1, 1024 bytes" <<<"$output"' "report lacks op/seq/bytes"
check '! grep -q "returned from a collective" <<<"$output"' "a rank got past the stuck collective"
[ $fail -eq 0 ] && echo "timeout_test: passed" || echo "timeout_test: FAILED"
exit $fail
