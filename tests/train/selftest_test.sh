#!/usr/bin/env bash
# `shardtrain selftest` on 2 ranks, back to back and with `--cold-cache-mib` (each op timed
# alone after a cache eviction): every collective of every group checks its known result on
# every rank ("ok"), in both modes, and the cold mode says so in its header.
set -uo pipefail
shardtrain=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail=0
for cold in 0 2; do
  out=$(timeout 120 "$(dirname "$0")/../mpirun.sh" 2 "$shardtrain" selftest --count 4096 \
    --iters 3 --cold-cache-mib "$cold" 2>&1)
  rc=$?
  rows=$(grep -cE '^[a-z]+ +[0-9]+  (all_gather|reduce_scatter|all_reduce|broadcast) ' <<<"$out")
  ok=$(grep -cE ' ok$' <<<"$out")
  header=$(grep -c "each alone with cold caches" <<<"$out")
  want_header=$([ "$cold" -gt 0 ] && echo 1 || echo 0)
  if [ "$rc" -ne 0 ] || [ "$rows" -lt 12 ] || [ "$ok" -ne "$rows" ] || [ "$header" -ne "$want_header" ]; then
    echo "FAIL: selftest --cold-cache-mib $cold: exit $rc, $ok of $rows rows ok, header $header"
    echo "$out"
    fail=1
  else
    echo "ok: selftest --cold-cache-mib $cold: $rows rows, all ok"
  fi
done
exit $fail
