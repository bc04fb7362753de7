#!/usr/bin/env bash
# `shardtrain selftest` on 2 ranks, back to back and with `--cold-cache-mib` (each op timed
# alone after a cache eviction): every collective of every group checks its known result on
# every rank ("ok"), in both modes, and the cold mode says so in its header. With
# `--backend nccl` where NCCL cannot join the ranks, every rank reports and exits 2, promptly.
set -uo pipefail
shardtrain=$1
mpirun_sh=$(dirname "$0")/../mpirun.sh
# shellcheck source=tests/train/each_rank.sh
. "$(dirname "$0")/each_rank.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail=0
for cold in 0 2; do
  out=$(timeout 120 "$mpirun_sh" 2 "$shardtrain" selftest --count 4096 \
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

# One rank, one element, one iteration: the header counts each in the singular.
out=$(timeout 60 "$mpirun_sh" 1 "$shardtrain" selftest --count 1 --iters 1 2>&1)
want="shardtrain selftest: 1 rank, mesh 1 x 1 x 1 (dp_replicate x dp_shard x tp), backend mpi, "
want+="device cpu, 1 fp32 element per rank, 1 iteration"
if ! grep -qxF "$want" <<<"$out"; then
  echo "FAIL: selftest on 1 rank, --count 1 --iters 1: no header '$want':"
  echo "$out"
  fail=1
else
  echo "ok: selftest on 1 rank: $want"
fi

# CPU devices (or a build without NCCL): each rank prints the error, saying that it applies to
# every rank, and each rank's own exit code is 2 (each_rank.sh).
each_rank "selftest --backend nccl on CPU ranks" 2 2 \
  "error: shardtrain selftest: NCCL cannot join the ranks: every rank (all 2) " \
  "$shardtrain" selftest --device cpu --backend nccl || fail=1
exit $fail
