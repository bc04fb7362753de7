#!/usr/bin/env bash
# A rank that fails or differs on its own must not leave the others waiting for it (the CLI's
# start and end, engine/cli/cli_job.h). On 2 ranks, with only rank 1 touched:
# - other arguments (--seed) or arguments only it rejects (--lr nan): every rank reports it and
#   exits 2, at once;
# - a bad token in its slice of the data at step 3: every rank reports it and exits 1, at once;
# - an environment only it rejects (ST_COMM_TIMEOUT=abc), found by the mesh's set-up, which
#   shares rank 1's verdict: every rank reports it and exits 2, at once (until 2026-11-29 rank 1
#   left alone and the job ended only by mpirun's reaction to it);
# - a checkpoint write stalled on rank 1 (ST_CKPT_TEST_DELAY_MS stands in for a hung file
#   system): the job ends with exit code 3 once rank 1's ST_IO_TIMEOUT has passed, not at the
#   delay's end, blocking and in the background, rank 1 naming the file (rank 0, which waits
#   without a limit, has a long one); a value of ST_IO_TIMEOUT only rank 1 rejects is reported
#   by every rank at start-up, exit code 2;
# - the writer's --export or --save-init stalled (ST_WRITE_TEST_DELAY_MS): exit code 3 once its
#   ST_IO_TIMEOUT has passed, naming the file, which keeps its previous content; so does a
#   stalled --metrics line (the other ranks wait for it without a limit).
set -uo pipefail
shardtrain=$(realpath "$1")
mpirun_sh=$(realpath "$(dirname "$0")/../mpirun.sh")
# shellcheck source=tests/train/each_rank.sh
. "$(dirname "$0")/each_rank.sh"
work=${TEST_TMPDIR:-$(mktemp -d)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail=0

# Token data: 20,000 tokens below the vocabulary (256) but token 700, which is 300; llm.c's
# header (magic, version, count). Rank 1 reads it in step 3 at micro-batch 2 of 64 tokens.
python3 - "$work/oov.bin" <<'PY'
import array, struct, sys
tokens = array.array("H", (i % 251 for i in range(20000)))
tokens[700] = 300
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(tokens.tobytes())
PY
python3 - "$work/good.bin" <<'PY'
import array, struct, sys
tokens = array.array("H", (i % 251 for i in range(20000)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(tokens.tobytes())
PY

# Rank 1 alone runs with $R1_ARGS appended, the assignments of $R1_ENV exported and, with R1_CD,
# in that working directory.
cat > "$work/rank1.sh" <<'SH'
#!/usr/bin/env bash
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then
  if [ -n "${R1_CD:-}" ]; then cd "$R1_CD" || exit 9; fi
  # shellcheck disable=SC2086 # the assignments are words
  [ -n "${R1_ENV:-}" ] && export ${R1_ENV?}
  # shellcheck disable=SC2086 # the extra arguments are words
  exec "$@" ${R1_ARGS:-}
fi
exec "$@"
SH
chmod +x "$work/rank1.sh"

# check NAME CODES SECONDS PATTERN ARGS...: on 2 ranks, within SECONDS, each rank ends as CODES
# and PATTERN says (each_rank.sh: "2", both exit 2 and say it; "-,3", rank 1 exits 3 and says
# it, and the job ends rank 0; "0" with no PATTERN, no error line). Run in $RUN_IN if set.
check() {
  local name=$1 codes=$2 seconds=$3 pattern=$4 here=$PWD start took
  shift 4
  start=$(date +%s)
  cd "${RUN_IN:-.}" || exit 1
  EACH_RANK_TIMEOUT=120 each_rank "$name" 2 "$codes" "$pattern" "$work/rank1.sh" "$shardtrain" \
    train --model tiny --micro-batch 2 --steps 6 --zero 3 --quiet "$@" || fail=1
  cd "$here" || exit 1
  took=$(($(date +%s) - start))
  if [ "$took" -gt "$seconds" ]; then
    echo "FAIL: $name: ended after ${took}s (at most $seconds)"
    fail=1
  fi
}

R1_ARGS="--seed 7" check "other arguments on rank 1" 2 30 \
  "world rank 1 was started with other arguments than rank 0" --data-train "$work/good.bin"
R1_ARGS="--lr nan" check "an argument only rank 1 rejects" 2 30 \
  "--lr: 'nan' is not a finite number" --data-train "$work/good.bin"
check "a bad token in rank 1's slice at step 3" 1 30 \
  "oov.bin: token 300 at index 700 is not below the vocabulary size 256" \
  --data-train "$work/oov.bin"
R1_ENV="ST_COMM_TIMEOUT=abc" check "an environment only rank 1 rejects" 2 30 \
  "ST_COMM_TIMEOUT='abc' is not a positive number of seconds" --data-train "$work/good.bin"

stuck="ST_CKPT_TEST_DELAY_MS=600000"
ST_IO_TIMEOUT=60 R1_ENV="$stuck ST_IO_TIMEOUT=2" check "rank 1's blocking checkpoint write stuck" \
  -,3 30 "writing the checkpoint file .*/\.step_3\.tmp/.* did not finish within 2 s (ST_IO_TIMEOUT)" \
  --data-train "$work/good.bin" --ckpt-every 3 --ckpt-dir "$work/ckpt_blocking"
ST_IO_TIMEOUT=60 R1_ENV="$stuck ST_IO_TIMEOUT=2" check "rank 1's background checkpoint write stuck" \
  -,3 30 "writing the checkpoint file .*/\.step_3\.tmp/.* did not finish within 2 s (ST_IO_TIMEOUT)" \
  --data-train "$work/good.bin" --ckpt-every 3 --ckpt-dir "$work/ckpt_async" --ckpt-async
R1_ENV="ST_IO_TIMEOUT=abc" check "ST_IO_TIMEOUT only rank 1 rejects" 2 30 \
  "ST_IO_TIMEOUT='abc' is not a positive number of seconds" --data-train "$work/good.bin"

# stuck_export FLAG: the writer's file for FLAG stalls; the file there before is kept.
stuck_export() {
  local flag=$1 file="$work/stuck${1}.safetensors"
  echo previous >"$file"
  ST_IO_TIMEOUT=2 ST_WRITE_TEST_DELAY_MS=600000 check "the writer's $flag stuck" 3,- 30 \
    "writing .*/stuck$flag.safetensors did not finish within 2 s (ST_IO_TIMEOUT)" \
    --data-train "$work/good.bin" "$flag" "$file"
  if [ "$(cat "$file")" != previous ]; then
    echo "FAIL: the stuck $flag replaced the file that was there"
    fail=1
  fi
}
stuck_export --export
stuck_export --save-init
ST_IO_TIMEOUT=2 ST_WRITE_TEST_DELAY_MS=600000 check "the writer's --metrics line stuck" 3,- 30 \
  "appending to --metrics .*/stuck.jsonl did not finish within 2 s (ST_IO_TIMEOUT)" \
  --data-train "$work/good.bin" --metrics "$work/stuck.jsonl"

# Rank 1 sees another --ckpt-dir than rank 0 (here: another working directory; on a cluster a
# node-local path). Without one there at all, or with one of its own (an older checkpoint
# there, which --resume would have mixed with rank 0's newer one): every rank stops at start-up,
# exit 2, not at the first save, rank 1 not finding the lock file rank 0 wrote.
mkdir -p "$work/r0" "$work/r1" "$work/r1-empty"
RUN_IN="$work/r1" check "an older checkpoint, seen by rank 1 only" 0 60 "" \
  --data-train "$work/good.bin" --ckpt-dir ck --stop-at 1
RUN_IN="$work/r0" check "the newer checkpoint, seen by rank 0 only" 0 60 "" \
  --data-train "$work/good.bin" --ckpt-dir ck --stop-at 2
RUN_IN="$work/r0" R1_CD="$work/r1-empty" check "--ckpt-dir not seen by rank 1" 2 30 \
  "--ckpt-dir ck: world rank 1 (host .*) does not find there the lock file world rank 0 wrote (pid .*) but none" \
  --data-train "$work/good.bin" --ckpt-dir ck
RUN_IN="$work/r0" R1_CD="$work/r1" check "--resume where rank 1 sees an older checkpoint" 2 30 \
  "--ckpt-dir ck: world rank 1 (host .*) does not find there the lock file world rank 0 wrote (pid .*) but 'pid" \
  --data-train "$work/good.bin" --ckpt-dir ck --resume

# The control: the same job untouched trains.
check "no rank touched" 0 60 "" --data-train "$work/good.bin"

exit "$fail"
