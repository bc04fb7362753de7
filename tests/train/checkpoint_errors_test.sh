#!/usr/bin/env bash
# Checkpoints that cannot be used, and checkpoint flags that cannot work, are refused: on one
# rank and on two, the job exits 2 (bad input, like a bad flag) within the time limit, every
# rank prints exactly one error line, that line names the file or flag at fault and the
# problem, and no checkpoint directory changes in any byte (nor gains or loses a file).
# Cases: a truncated rank file, a flipped byte in one, a missing one, an edited manifest (its
# piece table, or only its vocabulary: DONE records its SHA-256), a DONE or a directory name of
# another step (through inspect), a
# checkpoint of another model (--n-layer 3 on 2 layers), a step directory without DONE, a path
# that does not exist, --tp 3 (tp does not divide the 4 heads), --resume without --ckpt-dir,
# --resume with --resume-from, a --ckpt-dir that is a regular file or lies under one (what
# an unwritable directory looks like even to root, who ignores chmod), a --ckpt-dir or a file
# given as the checkpoint, --init-from with --resume or --resume-from, outputs that are
# inputs (a file of the resumed checkpoint, a training shard) or each other, outputs named as
# step directories of --ckpt-dir or as its lock file, and a --ckpt-dir inside the --resume-from
# checkpoint.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"
# shellcheck source=tests/train/each_rank.sh
. "$(dirname "$0")/each_rank.sh"
# shardtrain starts MPI even on one rank: see tests/mpirun.sh for why leaks go unchecked here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
common=(train --model tiny --data-train "$work/data/bytes_train_*.bin" --steps 3 --lr 3e-3
        --seed 7 --micro-batch 4)
fail=0

# Two good checkpoints, of one rank (1 file) and of dp-shard 2 ZeRO-3 (2 files), and damaged
# copies of the second, each the only checkpoint in its own --ckpt-dir.
run save1 1 --steps 2 --ckpt-dir "$work/ck1"
run save2 2 --steps 2 --dp-shard 2 --zero 3 --ckpt-dir "$work/ck2"
good=$work/ck2/step_2
damaged() { mkdir -p "$work/bad/$1" && cp -a "$good" "$work/bad/$1/step_2"; }
damaged truncated && truncate -s -100 "$work/bad/truncated/step_2/rank_00001.safetensors"
damaged flipped && python3 - "$work/bad/flipped/step_2/rank_00001.safetensors" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as f:
    at = os.path.getsize(sys.argv[1]) // 2  # inside the tensor data, past the header
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x10]))
PY
damaged missing && rm "$work/bad/missing/step_2/rank_00000.safetensors"
damaged nodone && rm "$work/bad/nodone/step_2/DONE"
damaged edited && python3 - "$work/bad/edited/step_2/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["pieces"][3][4] -= 16
json.dump(m, open(sys.argv[1], "w"))
PY
# Edits the piece table does not show, which DONE's record of the manifest and its step does:
# another vocabulary (an export would drop 56 trained rows), DONE of another step, a copy
# named for another step.
damaged vocab && python3 - "$work/bad/vocab/step_2/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["model"]["vocab"] = 200
json.dump(m, open(sys.argv[1], "w"))
PY
damaged donestep && printf 'step 5\n' > "$work/bad/donestep/step_2/DONE"
mkdir -p "$work/bad/renamed" && cp -a "$good" "$work/bad/renamed/step_3"
printf 'not a directory\n' > "$work/plainfile"

snapshot() { # every checkpoint file, not the lock file a job on a --ckpt-dir holds
  (cd "$work" && find ck1 ck2 bad plainfile ! -name .lock -printf '%y %p %s %m\n' | sort &&
   find ck1 ck2 bad plainfile -type f ! -name .lock -print0 | sort -z | xargs -0 sha256sum)
}
before=$(snapshot)

# refused NAME NEEDLE1 NEEDLE2 ARGS...: on 1 rank (stderr must be that one line) and on 2 ranks
# (each rank's one error line, its own exit code: each_rank.sh), exit 2, each error line holding
# both needles (fixed strings, in that order; NEEDLE2 may be empty).
refused() {
  local name=$1 n1=$2 n2=$3
  shift 3
  local err rc lines hits
  err=$(timeout 60 "$shardtrain" "${common[@]}" "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(grep -c . <<<"$err")
  hits=$(grep -F -- "$n1" <<<"$err" | grep -c -F -- "$n2")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || [ "$hits" -ne 1 ]; then
    echo "FAIL: $name on 1 rank: exit $rc (want 2), $lines lines (want 1), output:"
    echo "$err"
    fail=1
  else
    echo "ok: $name on 1 rank -> $rc: $err"
  fi
  each_rank "$name on 2 ranks" 2 2 "$(bre "$n1").*$(bre "$n2")" "$shardtrain" "${common[@]}" "$@" ||
    fail=1
}
# bre TEXT: a basic regular expression that matches TEXT (its special characters escaped).
bre() { sed 's/[][\.*^$]/\\&/g' <<<"$1"; }

b=$work/bad
refused "truncated rank file" "$b/truncated/step_2/rank_00001.safetensors: " \
  "bytes, the manifest says" --resume-from "$b/truncated/step_2"
refused "truncated rank file (--resume)" "$b/truncated/step_2/rank_00001.safetensors: " \
  "(truncated or replaced)" --ckpt-dir "$b/truncated" --resume
refused "flipped byte" "$b/flipped/step_2/rank_00001.safetensors: SHA-256 " \
  "the file is damaged" --resume-from "$b/flipped/step_2"
refused "missing rank file" "$b/missing/step_2/rank_00000.safetensors: " "cannot open" \
  --resume-from "$b/missing/step_2"
refused "edited manifest" "$b/edited/step_2/manifest.json: " "piece 3 does not match" \
  --resume-from "$b/edited/step_2"
refused "edited vocabulary" "$b/vocab/step_2/manifest.json: SHA-256 " \
  "DONE records" --resume-from "$b/vocab/step_2"
# The same check in the offline tools (one process, exit 1 for a damaged checkpoint).
for c in "donestep/step_2|DONE says step 5, its manifest step 2" \
         "renamed/step_3|is named for step 3, its manifest is of step 2"; do
  dir=$b/${c%%|*} needle=${c#*|}
  err=$(timeout 60 "$shardtrain" inspect "$dir" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 1 ] || [ "$(grep -c . <<<"$err")" -ne 1 ] || ! grep -qF -- "$needle" <<<"$err"; then
    echo "FAIL: inspect $dir: exit $rc (want 1), output:"; echo "$err"; fail=1
  else
    echo "ok: inspect $dir -> $rc: $err"
  fi
done
refused "another model" "$good/manifest.json: " "n_layer 2, n_head 4, n_embd 64" \
  --resume-from "$good" --n-layer 3
refused "no DONE" "$b/nodone/step_2: " "no DONE marker" --resume-from "$b/nodone/step_2"
refused "nonexistent" "--resume-from: $work/nowhere/step_2: " "no such directory" \
  --resume-from "$work/nowhere/step_2"
refused "tp 3" "tp 3 does not divide n_head 4" "" --tp 3 --resume-from "$good"
refused "--resume without --ckpt-dir" "--resume needs --ckpt-dir" "" --resume
refused "--resume with --resume-from" "--resume and --resume-from $good" "give one of them" \
  --resume --resume-from "$good" --ckpt-dir "$work/ck2"
# Paths that are not step directories, each named for what it is.
refused "--resume-from a --ckpt-dir" "--resume-from: $work/ck2 holds no checkpoint files" \
  "is it the --ckpt-dir? Its checkpoints are step_N subdirectories; the newest complete one is $work/ck2/step_2" \
  --resume-from "$work/ck2"
refused "--resume-from the --ckpt-dir given too" "--resume-from: $work/ck2 holds no checkpoint files" \
  "is it the --ckpt-dir? Its checkpoints are step_N subdirectories; the newest complete one is $work/ck2/step_2" \
  --resume-from "$work/ck2" --ckpt-dir "$work/ck2"
refused "--resume-from a file" "$work/plainfile is a file, not a checkpoint directory" "" \
  --resume-from "$work/plainfile"
refused "--init-from with --resume-from" "--init-from $work/plainfile and --resume-from $good" \
  "give one of them" --init-from "$work/plainfile" --resume-from "$good"
refused "--init-from with --resume" "--init-from $work/plainfile and --resume" "give one of them" \
  --init-from "$work/plainfile" --resume --ckpt-dir "$work/ck2"
# Outputs that are the run's inputs or each other: refused before anything is written (the
# snapshot below holds the checkpoints; the data shard's checksum is compared here).
refused "--export into the resumed checkpoint" "--export $good/rank_00001.safetensors is in the checkpoint --resume-from $good" \
  "" --resume-from "$good" --export "$good/rank_00001.safetensors"
refused "--metrics into the resumed checkpoint" "--metrics $good/rank_00001.safetensors is in the checkpoint" \
  "" --resume-from "$good" --metrics "$good/rank_00001.safetensors"
refused "--save-init into a step directory of --ckpt-dir" "--save-init $work/ck1/step_2/x.safetensors is inside a checkpoint of --ckpt-dir $work/ck1" \
  "" --ckpt-dir "$work/ck1" --save-init "$work/ck1/step_2/x.safetensors"
# ... and into a checkpoint the run is not given at all: it would damage that one as well.
refused "--save-init over a manifest of a checkpoint not the run's" "--save-init $good/manifest.json is inside the checkpoint $good" \
  "" --save-init "$good/manifest.json"
refused "--metrics into a checkpoint not the run's" "--metrics $good/DONE is inside the checkpoint $good" \
  "" --metrics "$good/DONE"
# A folder whose manifest.json is another tool's is no checkpoint: an output there is fine.
mkdir -p "$work/webapp" && printf '{"name": "a web app"}\n' > "$work/webapp/manifest.json"
if ! timeout 60 "$shardtrain" "${common[@]}" --steps 1 --quiet --metrics "$work/webapp/m.jsonl" \
     2> "$work/webapp.err" || [ ! -s "$work/webapp/m.jsonl" ]; then
  echo "FAIL: an output beside another tool's manifest.json: $(cat "$work/webapp.err")"
  fail=1
else
  echo "ok: an output beside another tool's manifest.json is written"
fi
# A file with the name of a step directory (one the run would make, or move aside on the way):
# the save would fail at that step, or move the file aside and leave it there.
refused "--export named as a step directory of --ckpt-dir" "--export $work/ck1/step_3 has the name of a checkpoint of --ckpt-dir $work/ck1" \
  "" --ckpt-dir "$work/ck1" --export "$work/ck1/step_3"
refused "--metrics named as a step on its way" "--metrics $work/ck1/.step_2.old has the name of a checkpoint of --ckpt-dir $work/ck1" \
  "" --ckpt-dir "$work/ck1" --metrics "$work/ck1/.step_2.old"
refused "--metrics the lock file of --ckpt-dir" "--metrics $work/ck1/.lock is the lock file the run holds in --ckpt-dir $work/ck1" \
  "" --ckpt-dir "$work/ck1" --metrics "$work/ck1/.lock"
refused "--ckpt-dir inside --resume-from" "--ckpt-dir $good/sub is in the checkpoint --resume-from $good" \
  "" --resume-from "$good" --ckpt-dir "$good/sub"
refused "--ckpt-dir the --resume-from" "--ckpt-dir $good is in the checkpoint --resume-from $good" \
  "" --resume-from "$good" --ckpt-dir "$good"
shard=$work/data/bytes_train_000000.bin
shard_sum=$(sha256sum < "$shard")
refused "--metrics into a training shard" "--metrics $work/data/./bytes_train_000000.bin is a data shard of --data-train" \
  "($shard)" --metrics "$work/data/./bytes_train_000000.bin"
[ "$(sha256sum < "$shard")" = "$shard_sum" ] || { echo "FAIL: the training shard changed"; fail=1; }
refused "--metrics and --export the same file" "--export $work/same.out and --metrics $work/same.out are the same file" \
  "" --metrics "$work/same.out" --export "$work/same.out"
[ ! -e "$work/same.out" ] || { echo "FAIL: a refused run wrote $work/same.out"; fail=1; }
refused "--ckpt-dir a regular file" "--ckpt-dir $work/plainfile: " "not a writable directory" \
  --ckpt-dir "$work/plainfile"
refused "--ckpt-dir under a regular file" "--ckpt-dir $work/plainfile/sub: " "cannot create" \
  --ckpt-dir "$work/plainfile/sub" --ckpt-every 1

after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "FAIL: the checkpoint directories changed:"
  diff <(echo "$before") <(echo "$after")
  fail=1
else
  echo "ok: every checkpoint directory is as it was ($(grep -c . <<<"$before") entries)"
fi
[ $fail -eq 0 ] && echo "checkpoint_errors_test: passed" || echo "checkpoint_errors_test: FAILED"
exit $fail
