#!/usr/bin/env bash
# The offline checkpoint tools, end to end:
#   - reshard: a checkpoint written on 2 ranks at ZeRO-3 and resharded for tp 2 x dp-shard 2 at
#     ZeRO-1 resumes there bit-identically to resuming from the original (same losses, same
#     export bytes), and within 1e-5 of the run that never stopped on that mesh;
#   - export: `shardtrain export` of a checkpoint is byte-identical to `train --export` of the
#     run that wrote it, and importing that file (--init-from) and exporting it again gives the
#     same bytes;
#   - inspect: lists every file as ok and exits 0; with a flipped byte it marks the file
#     DAMAGED, names it in one error line and exits 1;
#   - sample: greedy text from the model trained on 1 rank, on dp-shard 2 at ZeRO-3 and on
#     tp 2 x dp-shard 2 at ZeRO-1 is the same, read from checkpoints and from exports (and
#     --stop-at ends a run with a checkpoint at that step; not under the sanitizers);
#   - bad input: resharding into an existing directory, for a tp that does not divide the heads
#     or a mesh beyond the limits, or into a step_<N> of another step (no parent directory is
#     left, nor after a reshard that failed reading), missing paths, a directory that is not a checkpoint, an output that cannot be
#     written (a missing directory, a name too long, a directory for a file): one error line,
#     exit 2, before any work; a damaged manifest (a mesh beyond the limits, a vocabulary that
#     overflows, a loss scale of 0): one line naming it, exit 1, at once.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

ck=$work/ck
run src 2 --micro-batch 4 --zero 3 --ckpt-dir "$ck" --ckpt-every 5
[ -f "$ck/step_5/DONE" ] && [ -f "$ck/step_10/DONE" ] || fail "the training run did not save step_5 and step_10"

# reshard, then resume from the original and from the resharded copy on the target mesh
"$shardtrain" reshard "$ck/step_5" "$work/rs" --tp 2 --dp-shard 2 --zero 1 > "$work/rs.log" 2>&1 \
  || { cat "$work/rs.log"; fail "reshard exited non-zero"; }
[ "$(ls "$work/rs"/rank_*.safetensors | wc -l)" = 4 ] || fail "reshard did not write 4 rank files"
target=(--micro-batch 4 --tp 2 --dp-shard 2 --zero 1)
run target 4 "${target[@]}"
run from_orig 4 "${target[@]}" --resume-from "$ck/step_5"
run from_rs 4 "${target[@]}" --resume-from "$work/rs"
python3 - "$work" "$(dirname "$0")" <<'PY' || exit 1
import sys
sys.path.insert(0, sys.argv[2])
import run_outputs as ro
work = sys.argv[1]
target, orig, rs = (ro.metrics(work, n) for n in ("target", "from_orig", "from_rs"))
assert [m["step"] for m in orig] == list(range(5, 10)), [m["step"] for m in orig]
for a, b in zip(orig, rs):
    for key in ("loss", "grad_norm", "lr"):
        assert a[key] == b[key], ("resharded resume differs", a["step"], key, a[key], b[key])
assert ro.same_export(work, "from_orig", "from_rs"), "resharded resume exports other bytes"
worst = 0.0
for a, b in zip(orig, target[5:]):
    for key in ("loss", "grad_norm"):
        worst = max(worst, abs(a[key] - b[key]) / abs(b[key]))
assert worst < 1e-5, ("resumed run differs from the never-stopped one", worst)
print(f"reshard: resume bit-identical to the original's; worst relative difference to the "
      f"never-stopped run {worst:.2e}")
PY

# export, and its round trip through --init-from
"$shardtrain" export "$ck/step_10" "$work/offline.safetensors" > /dev/null || fail "export failed"
cmp "$work/offline.safetensors" "$work/src.safetensors" || fail "export differs from train --export"
# train starts MPI even on one rank: under --config=asan, leak detection is off for it as in
# cli_errors_test.sh; the offline commands start no MPI and keep it.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
  "$shardtrain" train --model tiny --steps 0 --init-from "$work/offline.safetensors" \
  --export "$work/again.safetensors" > /dev/null 2>&1 || fail "--init-from the export failed"
cmp "$work/offline.safetensors" "$work/again.safetensors" || fail "export does not round-trip"

# a model whose MLP matrices (512 x 2048) span several of the checkpoint code's 2^18-element
# chunks: a resume at step 2 of 4 is bit-identical, and so is one from a resharded copy
wide=(--n-embd 512 --n-head 8 --steps 4 --micro-batch 2)
run w_full 2 "${wide[@]}" --zero 3
run w_first 2 "${wide[@]}" --zero 3 --stop-at 2 --ckpt-dir "$work/w_ck"
run w_rest 2 "${wide[@]}" --zero 3 --resume-from "$work/w_ck/step_2"
"$shardtrain" reshard "$work/w_ck/step_2" "$work/w_rs" --dp-shard 2 --zero 3 > /dev/null \
  || fail "reshard of the wide model failed"
run w_rs 2 "${wide[@]}" --zero 3 --resume-from "$work/w_rs"
cmp "$work/w_full.safetensors" "$work/w_rest.safetensors" || fail "wide model: resumed export differs"
cmp "$work/w_full.safetensors" "$work/w_rs.safetensors" || fail "wide model: resharded resume differs"
[ "$(tail -2 "$work/w_full.jsonl" | cut -d, -f2-4)" = "$(cut -d, -f2-4 "$work/w_rest.jsonl")" ] \
  || fail "wide model: resumed losses differ"

# greedy sampling: the same text from the model trained on every mesh. 400 steps make text
# that is more than the spaces an untrained model repeats; over that many steps Adam amplifies
# the meshes' rounding differences until greedy choices part, so the meshes share the first 390
# steps (--stop-at, one rank) and each trains the last 10 from that checkpoint.
# Numbers only: under the sanitizers (ST_TEST_SANITIZED, .bazelrc) the 400-step runs are left
# out, as the other tests' whole-run comparisons are; the sampler runs there in tests/sample.
if [ -z "${ST_TEST_SANITIZED:-}" ]; then
  long=(--steps 400 --warmup 20)
  run g_base 1 --micro-batch 8 "${long[@]}" --stop-at 390 --ckpt-dir "$work/g_base"
  [ -f "$work/g_base/step_390/DONE" ] && [ ! -e "$work/g_base/step_400" ] \
    || fail "--stop-at 390 did not end the run with a checkpoint at step 390"
  run g_one 1 --micro-batch 8 "${long[@]}" --resume-from "$work/g_base/step_390" --ckpt-dir "$work/g_one"
  run g_s2 2 --micro-batch 4 --zero 3 "${long[@]}" --resume-from "$work/g_base/step_390" \
    --ckpt-dir "$work/g_s2"
  run g_tp 4 "${target[@]}" "${long[@]}" --resume-from "$work/g_base/step_390" --ckpt-dir "$work/g_tp"
  greedy() { "$shardtrain" sample --from "$1" --prompt "The " --tokens 40 --temperature 0 2> /dev/null; }
  want=$(greedy "$work/g_one.safetensors")
  [ "$(printf '%s' "$want" | fold -w1 | sort -u | wc -l)" -ge 5 ] \
    || fail "greedy text '$want' has fewer than 5 distinct characters"
  for from in "$work/g_one/step_400" "$work/g_s2/step_400" "$work/g_s2.safetensors" \
              "$work/g_tp/step_400" "$work/g_tp.safetensors"; do
    got=$(greedy "$from")
    [ "$got" = "$want" ] || fail "greedy text from $from is '$got', from one rank '$want'"
  done
  echo "greedy text equal on 1 rank, s2 ZeRO-3 and tp2 x s2 ZeRO-1: '$want'"
fi

# inspect
"$shardtrain" inspect "$ck/step_10" > "$work/inspect.log" 2>&1 || fail "inspect of a good checkpoint exited non-zero"
[ "$(grep -c ' ok$' "$work/inspect.log")" = 2 ] || { cat "$work/inspect.log"; fail "inspect did not list 2 ok files"; }
grep -q "step        10" "$work/inspect.log" || fail "inspect does not print the step"
cp -r "$ck/step_10" "$work/damaged"
printf '\x5a' | dd of="$work/damaged/rank_00001.safetensors" bs=1 seek=3000 conv=notrunc 2> /dev/null
"$shardtrain" inspect "$work/damaged" > "$work/damaged.log" 2>&1
rc=$?
[ $rc = 1 ] || fail "inspect of a damaged checkpoint exited $rc, expected 1"
grep -q "DAMAGED" "$work/damaged.log" || fail "inspect did not mark the damaged file"
[ "$(grep -c 'error:' "$work/damaged.log")" = 1 ] || fail "expected one error line"
grep -q "error: .*damaged/rank_00001.safetensors: SHA-256" "$work/damaged.log" \
  || { cat "$work/damaged.log"; fail "the error line does not name the file and the checksum"; }

# bad input: one error line naming the problem, exit 2, nothing written
expect_bad() {
  local pattern=$1
  shift
  "$shardtrain" "$@" > "$work/bad.log" 2>&1
  local rc=$?
  [ $rc = 2 ] || { cat "$work/bad.log"; fail "'$*' exited $rc, expected 2"; }
  [ "$(wc -l < "$work/bad.log")" = 1 ] || { cat "$work/bad.log"; fail "'$*': expected one line"; }
  grep -q -- "$pattern" "$work/bad.log" || { cat "$work/bad.log"; fail "'$*' does not say '$pattern'"; }
}
expect_bad "exists" reshard "$ck/step_5" "$work/rs" --tp 2
# refused before any file is read or directory made: no new parent is left behind
expect_bad "tp 3 does not divide n_head 4" reshard "$ck/step_5" "$work/np/rs3" --tp 3
expect_bad "mesh 1x2000000x1: 2000000 ranks and 2000000 files; a checkpoint holds at most" \
  reshard "$ck/step_5" "$work/np/rs" --dp-shard 2000000
expect_bad "DST $work/np/step_8 is named for step 8, the checkpoint is of step 5" \
  reshard "$ck/step_5" "$work/np/step_8" --dp-shard 2
[ ! -e "$work/np" ] || fail "a refused reshard left $work/np"
# a reshard that fails while reading (a damaged SRC: exit 1) removes the parent it made
"$shardtrain" reshard "$work/damaged" "$work/np/step_10" --dp-shard 2 > "$work/bad.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "SHA-256" "$work/bad.log" || { cat "$work/bad.log"; fail "reshard of a damaged SRC exited $rc, expected 1"; }
[ ! -e "$work/np" ] || fail "a failed reshard left $work/np"
expect_bad "expected SRC and DST" reshard "$ck/step_5"
expect_bad "expected CKPT and OUT" export --help-me
expect_bad "not a checkpoint directory" inspect "$work/nowhere"
expect_bad "unknown flag\|--bogus" reshard "$ck/step_5" "$work/rs4" --bogus 1
# outputs that cannot be written, refused before any work: a missing directory, a name the file
# system cannot take with the temporary name's suffix
long_name=$(printf 'n%.0s' {1..250})
expect_bad "DST $work/none/deeper/rs: directory $work/none/deeper does not exist" \
  reshard "$ck/step_5" "$work/none/deeper/rs" --dp-shard 2
expect_bad "DST $work/$long_name: the name has 250 bytes" reshard "$ck/step_5" "$work/$long_name/" --dp-shard 2
expect_bad "OUT $work/none/m.safetensors: directory $work/none does not exist" \
  export "$ck/step_5" "$work/none/m.safetensors"
expect_bad "OUT $work/$long_name: the name has 250 bytes" export "$ck/step_5" "$work/$long_name"
expect_bad "OUT $work/rs is a directory" export "$ck/step_5" "$work/rs"
[ -z "$(find "$work" -maxdepth 1 -name "*.tmp.*")" ] || fail "a refused command left a temporary"
mkdir -p "$work/empty"
expect_bad "$work/empty holds no checkpoint files" inspect "$work/empty"
# paths that are not step directories, each named for what it is (exit 2)
expect_bad "$ck holds no checkpoint files: is it the --ckpt-dir? .* the newest complete one is $ck/step_10" \
  inspect "$ck"
expect_bad "$ck holds no checkpoint files: is it the --ckpt-dir?" export "$ck" "$work/x.safetensors"
expect_bad "$work/src.safetensors is a file, not a checkpoint directory" inspect "$work/src.safetensors"
# outputs inside the checkpoint read are refused, and the checkpoint stays whole
sums=$(sha256sum "$ck/step_10"/*)
expect_bad "OUT $ck/step_10/manifest.json is in the checkpoint CKPT $ck/step_10" \
  export "$ck/step_10" "$ck/step_10/manifest.json"
expect_bad "OUT $ck/step_10/rank_00000.safetensors is in the checkpoint" \
  export "$ck/step_10" "$ck/step_10/rank_00000.safetensors"
expect_bad "DST $ck/step_10/sub is in the checkpoint SRC $ck/step_10" \
  reshard "$ck/step_10" "$ck/step_10/sub" --dp-shard 2
[ "$(sha256sum "$ck/step_10"/*)" = "$sums" ] || fail "a refused command changed $ck/step_10"
# damaged manifests: one error line naming the file, exit 1, at once (timeout 20 s), without
# planning what they describe (a mesh of 2^26 files took 35 s and 7 GB before it was limited)
edited() {
  local name=$1 edit=$2 pattern=$3
  rm -rf "$work/edited_$name" && cp -r "$ck/step_10" "$work/edited_$name"
  python3 - "$work/edited_$name/manifest.json" "$edit" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(m, open(sys.argv[1], "w"))
PY
  timeout 20 "$shardtrain" inspect "$work/edited_$name" > "$work/bad.log" 2>&1
  local rc=$?
  [ $rc = 1 ] && [ "$(wc -l < "$work/bad.log")" = 1 ] &&
    grep -q -- "edited_$name/manifest.json: .*$pattern" "$work/bad.log" ||
    { cat "$work/bad.log"; fail "inspect of a manifest with $name: exit $rc, expected 1 and one line saying '$pattern'"; }
}
edited mesh 'm["mesh"] = [1, 1048576, 64]' "67108864 files; a checkpoint holds at most"
edited vocab 'm["model"]["vocab"] = 2147483647' "vocab 2147483647 padded"
edited scale 'm["loss_scale"] = 0' "'loss_scale' is not a number in"
# sample: --n-head against the checkpoint's 4 heads
expect_bad "$ck/step_10/manifest.json records n_head 4 and --n-head is 2" \
  sample --from "$ck/step_10" --prompt hi --n-head 2
# reshard into a checkpoint directory still to be made (as written in docs/CLI.md), as train
# makes --ckpt-dir
"$shardtrain" reshard "$ck/step_5" "$work/ck8/step_5" --dp-shard 2 > "$work/bad.log" 2>&1 \
  && [ -f "$work/ck8/step_5/DONE" ] || { cat "$work/bad.log"; fail "reshard into a new parent"; }
# DST with the slash a shell's completion adds names the same directory (its temporary went
# inside the directory still to be made: exit 1)
"$shardtrain" reshard "$ck/step_5" "$work/ck9/step_5/" --dp-shard 4 > "$work/bad.log" 2>&1 \
  && [ -f "$work/ck9/step_5/DONE" ] || { cat "$work/bad.log"; fail "reshard into DST/"; }
# The resharded manifest's batch is the source's global batch (8 sequences) on the new dp
# ranks: 4 take micro-batches of 2; 3 cannot take it, which inspect says.
"$shardtrain" inspect "$work/ck9/step_5" > "$work/inspect9.log" 2>&1
grep -q "micro-batch 2 x grad-accum 1, 512 tokens per step" "$work/inspect9.log" \
  || { cat "$work/inspect9.log"; fail "a reshard onto 4 dp ranks records another batch"; }
"$shardtrain" reshard "$ck/step_5" "$work/ck3/step_5" --dp-shard 3 > "$work/bad.log" 2>&1 \
  && "$shardtrain" inspect "$work/ck3/step_5" > "$work/inspect3.log" 2>&1
grep -q "512 tokens per step: 8 sequences, which the 3 dp ranks of this mesh do not divide" \
  "$work/inspect3.log" || { cat "$work/bad.log" "$work/inspect3.log"; fail "inspect of a reshard onto 3 dp ranks"; }
echo "PASS"
