#!/usr/bin/env bash
# What a checkpoint directory holds over a run's life, and which checkpoint --resume takes:
#   - --keep 2 with --ckpt-every 1 over 5 steps leaves exactly step_4 and step_5;
#   - --resume takes the newest complete checkpoint by step number (step_10 over step_5, which
#     sorts after it as text) and skips a newer step directory without DONE (a copy of step_10
#     named step_12, DONE deleted); with no complete checkpoint there it starts at step 0 and
#     says so;
#   - a run resumed from an earlier step with --keep 2 keeps its own newest two checkpoints;
#     those of later steps, from the run it branched off, are left alone;
#   - a save killed midway: 2 ranks checkpoint every step, each rank sleeping 3 s after writing
#     its file (ST_CKPT_TEST_DELAY_MS); once step_1 is complete and .step_2.tmp holds a rank
#     file, one rank is killed with SIGKILL and mpirun ends the job. step_1 is left complete
#     and unchanged, no step_2 appears, a --resume run continues from step_1 (its log says
#     "resumed from .../step_1") bit-identically to a run that never stopped, and its save
#     (step_3, the last step) removes the partial .step_2.tmp;
#   - two jobs on one --ckpt-dir: the second is refused at start-up (the first holds its lock);
#   - a save that cannot be written on one rank (rank 1 under a file-size limit: EFBIG, what a
#     full disk's ENOSPC looks like to the writer): every rank exits 1 naming the file, the
#     earlier checkpoints and the metrics already written are kept, no step_3 appears, and a
#     run without the limit resumes from step_2 and its save removes the partial .step_3.tmp.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"
common=(train --model tiny --data-train "$work/data/bytes_train_*.bin" --lr 3e-3 --warmup 3
        --seed 7)
fail=0
check() { # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
listing() { # the names in directory $1 but the job's lock file, sorted bytewise, each followed by a space
  (cd "$1" && find . -mindepth 1 -maxdepth 1 ! -name .lock -printf '%f\n' | LC_ALL=C sort | tr '\n' ' ')
}
# shellcheck disable=SC2317 # called through check
logged() { grep -q -F -- "$2" "$work/$1.log"; }

# --keep 2 over 5 steps, on dp-shard 2 ZeRO-3.
run keep 2 --steps 5 --ckpt-every 1 --keep 2 --dp-shard 2 --zero 3 --micro-batch 4 \
  --ckpt-dir "$work/keep"
check "--keep 2 leaves step_4 and step_5 (found: $(listing "$work/keep"))" \
  test "$(listing "$work/keep")" = "step_4 step_5 "
check "every step was saved" test "$(grep -c "info: checkpoint $work/keep/step_" \
  "$work/keep.log")" -eq 5

# Newest complete by number; an incomplete newer one skipped.
run newest_save 1 --steps 10 --ckpt-every 5 --micro-batch 8 --ckpt-dir "$work/newest"
cp -a "$work/newest/step_10" "$work/newest/step_12" && rm "$work/newest/step_12/DONE"
run newest 1 --steps 11 --micro-batch 8 --ckpt-dir "$work/newest" --resume
check "--resume takes step_10 over step_5 and the incomplete step_12" \
  logged newest "resumed from $work/newest/step_10: step 10"
check "the resumed run trained step 10 only" \
  test "$(cut -d, -f1 "$work/newest.jsonl" | tr '\n' ' ')" = '{"step": 10 '
check "the incomplete step_12 is left alone" test "$(listing "$work/newest/step_12")" = \
  "manifest.json rank_00000.safetensors "

# A run resumed from an earlier step (a branch) keeps its own checkpoints under --keep: the
# later ones it branched off are neither counted nor deleted.
run branch 1 --steps 7 --ckpt-every 1 --keep 2 --micro-batch 8 --ckpt-dir "$work/newest" \
  --resume-from "$work/newest/step_5"
check "--keep 2 on a branch from step_5 keeps step_6, step_7 and the later ones (found: \
$(listing "$work/newest"))" test "$(listing "$work/newest")" = \
  "step_10 step_11 step_12 step_6 step_7 "

# Nothing complete to resume: start anew.
mkdir -p "$work/empty"
cp -a "$work/newest/step_12" "$work/empty/step_12"
run empty 1 --steps 1 --micro-batch 8 --ckpt-dir "$work/empty" --resume
check "--resume with no complete checkpoint starts at step 0" \
  logged empty "--resume: no complete checkpoint in $work/empty, starting at step 0"
check "... and trains from step 0" test "$(cut -d, -f1 "$work/empty.jsonl")" = '{"step": 0'

# kill -9 in the middle of a save.
dir=$work/killed
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ST_CKPT_TEST_DELAY_MS=3000 timeout 60 "$mpirun_sh" 2 "$shardtrain" "${common[@]}" --steps 4 \
  --dp-shard 2 --zero 3 --micro-batch 4 --ckpt-every 1 --ckpt-dir "$dir" \
  > "$work/killed.log" 2>&1 &
job=$!
victim=
for _ in $(seq 600); do
  if [ -e "$dir/step_1/DONE" ] && compgen -G "$dir/.step_2.tmp/rank_*.safetensors" > /dev/null; then
    victim=$(rank_pid "--ckpt-dir $dir" 1)
    break
  fi
  sleep 0.1
done
if [ -z "$victim" ]; then
  echo "FAIL: step_1 and a rank file in .step_2.tmp never appeared together, or no rank 1 found"
  ls -la "$dir" "$dir"/.step_2.tmp 2>&1
  kill -- "$job" 2>/dev/null
  wait "$job"
  cat "$work/killed.log"
  exit 1
fi
step1=$(cd "$dir/step_1" && sha256sum ./*)
kill -9 "$victim"
wait "$job"
rc=$?
check "the job ended by itself after the kill (exit $rc: non-zero, not the 60 s limit)" \
  test "$rc" -ne 0 -a "$rc" -ne 124
check "step_1 is complete and unchanged" test "$(cd "$dir/step_1" && sha256sum ./*)" = "$step1"
check "no step_2 was completed (found: $(listing "$dir"))" test "$(listing "$dir")" = \
  ".step_2.tmp step_1 "
check "the partial save has no DONE" test ! -e "$dir/.step_2.tmp/DONE"

run killed_resumed 2 --steps 3 --dp-shard 2 --zero 3 --micro-batch 4 --ckpt-dir "$dir" --resume
run unstopped 2 --steps 3 --dp-shard 2 --zero 3 --micro-batch 4
check "the resumed run continued from step_1" \
  logged killed_resumed "resumed from $dir/step_1: step 1"
check "its save removed the partial .step_2.tmp (found: $(listing "$dir"))" \
  test "$(listing "$dir")" = "step_1 step_3 "
resumed_lines=$(sed -E 's/"tokens_per_s".*//' "$work/killed_resumed.jsonl")
unstopped_lines=$(tail -n 2 "$work/unstopped.jsonl" | sed -E 's/"tokens_per_s".*//')
check "steps 1..2 after the crash equal the never-stopped run's" \
  test "$resumed_lines" = "$unstopped_lines"
check "and so does the export" cmp -s "$work/killed_resumed.safetensors" \
  "$work/unstopped.safetensors"

# A rank that cannot write its file. The model is 384 wide so that a rank file (about 22 MB at
# ZeRO-3 on 2 ranks) is larger than the limit, which must leave room for what MPI's start writes.
big=(--n-embd 384 --dp-shard 2 --zero 3 --micro-batch 4 --ckpt-every 1 --ckpt-dir "$work/full")
run full_save 2 --steps 2 "${big[@]}"
step2=$(cd "$work/full/step_2" && sha256sum ./*)
limited=$work/rank1_file_limit.sh
cat > "$limited" <<'SH'
#!/bin/sh
# Rank 1 under a 16 MiB file-size limit; SIGXFSZ ignored, so a write past it fails with EFBIG.
if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then trap '' XFSZ; ulimit -f 16384; fi
exec "$@"
SH
chmod +x "$limited"
timeout 60 "$mpirun_sh" 2 "$limited" "$shardtrain" "${common[@]}" --steps 4 --resume "${big[@]}" \
  --metrics "$work/full.jsonl" > "$work/full.log" 2>&1
rc=$?
check "the job whose rank 1 cannot write ended with exit 1 (got $rc)" test "$rc" -eq 1
failed='shardtrain train: .*/full/\.step_3\.tmp/rank_00001\.safetensors: write failed: File too large'
check "both ranks name the file and the failure" \
  test "$(grep -cE "^\[rank [01]\] error: $failed\$" "$work/full.log")" -eq 2
check "step_2 is complete and unchanged" test "$(cd "$work/full/step_2" && sha256sum ./*)" = "$step2"
check "no step_3 was completed (found: $(listing "$work/full"))" test "$(listing "$work/full")" = \
  ".step_3.tmp step_1 step_2 "
check "the metrics of the step trained before the save are kept" \
  test "$(cut -d, -f1 "$work/full.jsonl" | tr '\n' ' ')" = '{"step": 2 '
run full_resumed 2 --steps 4 --resume "${big[@]}"
check "a run without the limit resumed from step_2" \
  logged full_resumed "resumed from $work/full/step_2: step 2"
check "its saves removed the partial .step_3.tmp (found: $(listing "$work/full"))" \
  test "$(listing "$work/full")" = "step_1 step_2 step_3 step_4 "

# Two jobs on one --ckpt-dir (each would remove the other's save in progress and replace its
# checkpoints): the second is refused at start-up, exit 2, naming the first, which goes on.
ST_CKPT_TEST_DELAY_MS=1500 timeout 120 "$mpirun_sh" 1 "$shardtrain" "${common[@]}" --steps 2 \
  --ckpt-every 1 --micro-batch 8 --ckpt-dir "$work/shared" > "$work/first.log" 2>&1 &
first=$!
for _ in $(seq 300); do grep -q pid "$work/shared/.lock" 2> /dev/null && break; sleep 0.1; done
timeout 60 "$mpirun_sh" 1 "$shardtrain" "${common[@]}" --steps 2 --micro-batch 8 \
  --ckpt-dir "$work/shared" > "$work/second.log" 2>&1
rc=$?
check "a second job on the --ckpt-dir is refused (exit $rc, want 2)" test $rc -eq 2
check "... naming the first" logged second "--ckpt-dir $work/shared is in use by another job (pid "
wait $first
rc=$?
check "the first job goes on (exit $rc) and saves both steps (found: $(listing "$work/shared"))" \
  test $rc -eq 0 -a "$(listing "$work/shared")" = "step_1 step_2 "

[ $fail -eq 0 ] && echo "checkpoint_dir_test: passed" || echo "checkpoint_dir_test: FAILED"
exit $fail
