#!/usr/bin/env bash
# The timeout path: one rank of three skips a collective. Every process must be gone, with a
# non-zero exit, within the timeout plus a few seconds, and the report must name the group,
# the op, the sequence number and the bytes of the collective that never finished.
set -uo pipefail
mpirun_sh=$1
skipper=$2
# shellcheck source=tests/sharding/stuck_job.sh
. "$(dirname "$0")/stuck_job.sh"
timeout_s=2
limit_s=$((timeout_s + 20))

ST_COMM_TIMEOUT=$timeout_s stuck_job "$limit_s" "$mpirun_sh" 3 "$skipper"
echo "$output"
echo "exit code $rc after ${elapsed}s"
check_ended "$limit_s"
check 'grep -q "collective timed out" <<<"$output"' "no timeout report"
check 'grep -q "group world" <<<"$output"' "report does not name the group"
check 'grep -q "op all_reduce, seq 1, 1024 bytes" <<<"$output"' "report lacks op/seq/bytes"
[ $fail -eq 0 ] && echo "timeout_test: passed" || echo "timeout_test: FAILED"
exit $fail
