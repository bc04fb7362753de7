#!/usr/bin/env bash
# Bad input to the shardtrain CLI: each case must exit with the expected code, print exactly
# one error line (per rank) naming the problem, and never hang. The multi-rank cases check each
# rank's own error line and exit code (each_rank.sh), not only the job's.
set -uo pipefail
# shardtrain starts MPI even on one rank: under --config=asan, leak detection is off for it as
# for every MPI program (see tests/mpirun.sh for why).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
shardtrain=$1
mpirun_sh=$(dirname "$0")/../mpirun.sh
# shellcheck source=tests/train/each_rank.sh
. "$(dirname "$0")/each_rank.sh"
work=${TEST_TMPDIR:-$(mktemp -d)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0

# expect CODE PATTERN ARGS...: runs shardtrain ARGS with a time limit.
expect() {
  local code=$1 pattern=$2
  shift 2
  local err
  err=$(timeout 60 "$shardtrain" "$@" 2>&1 >/dev/null)
  local rc=$?
  local lines
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne "$code" ] || ! grep -q -- "$pattern" <<<"$err" || [ "$lines" -ne 1 ]; then
    echo "FAIL: shardtrain $* -> exit $rc (want $code), $lines error lines, output:"
    echo "$err"
    fail=1
  else
    echo "ok: shardtrain $* -> $rc: $err"
  fi
}

# make_shard PATH N: an llm.c token shard of N tokens.
make_shard() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
n = int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[(7 * i) % 256 for i in range(n)]))
PY
}

head -c 4096 /dev/zero > "$work/bad.bin"   # a full header whose magic number is 0
make_shard "$work/small.bin" 10            # shorter than any global batch
printf 'not safetensors' > "$work/bad.safetensors"

expect 2 "unknown command 'frobnicate'" frobnicate
expect 2 "unknown flag '--bogus'" train --bogus 1
expect 2 "--steps: 'x' is not an integer" train --steps x
# A well-formed number that does not fit an int is out of range, not "not an integer".
expect 2 "--steps 3000000000 is out of range (at most 2147483647)" train --steps 3000000000
expect 2 "--steps 9223372036854775807 is out of range (at most 2147483647)" \
  train --steps 9223372036854775807
expect 2 "--tokens 99999999999 is out of range (at most 2147483647)" sample --tokens 99999999999
expect 2 "--steps -3000000000 is out of range (at least -2147483648)" train --steps -3000000000
expect 2 "--micro-batch must be >= 1, got 0" train --micro-batch 0
expect 2 "--log-every must be >= 1, got 0" train --steps 0 --log-every 0
expect 2 "model 'huge' is not one of" train --model huge
expect 2 "n_embd 64 is not divisible by n_head 5" train --n-head 5
expect 2 "--lr-schedule 'exponential' is not cosine, linear, constant or wsd" \
  train --steps 0 --lr-schedule exponential
expect 2 "--decay-steps is for --lr-schedule wsd, not cosine" train --steps 0 --decay-steps 5
expect 2 "--ckpt-every, --keep, --ckpt-async and --stop-at need --ckpt-dir" train --steps 0 --ckpt-async
expect 2 "--ckpt-every, --keep, --ckpt-async and --stop-at need --ckpt-dir" train --steps 0 --stop-at 2
expect 2 "--decay-steps must be >= 0, got -1" train --steps 0 --lr-schedule wsd --decay-steps -1
expect 2 "--lr-schedule wsd has no step left to decay in: --warmup 9 takes all of --steps 9" \
  train --data-train "$work/bad.bin" --steps 9 --warmup 9 --lr-schedule wsd
expect 2 "--decay-steps 9 is more than the 8 steps after --warmup 2 of --steps 10" \
  train --data-train "$work/bad.bin" --steps 10 --warmup 2 --lr-schedule wsd --decay-steps 9
expect 2 "--data-train is required" train --steps 3
expect 2 "needs a value" train --data-train
expect 2 "$work/nothing" train --data-train "$work/nothing*.bin" --steps 1
expect 2 "magic" train --data-train "$work/bad.bin" --steps 1
# Data that holds no global batch: the error alone, no 'skipped' warning before it.
expect 2 "the data holds 0 sequences of T + 1 = [0-9]* tokens, fewer than the [0-9]* of one batch .* its largest shard, $work/small.bin, has 10 tokens" \
  train --data-train "$work/small.bin" --steps 1
expect 2 "$work/missing.safetensors" train --init-from "$work/missing.safetensors" --steps 0
expect 2 "bad.safetensors" train --init-from "$work/bad.safetensors" --steps 0
expect 2 "no usable GPU" train --device cuda --steps 0
expect 2 "--tp: 'two' is not an integer" selftest --tp two
expect 2 "--cold-cache-mib must be 0 to 65536, got -1" selftest --cold-cache-mib -1
# A count whose buffers cannot be allocated is refused before any rank allocates (not OOM-killed).
expect 2 "--count 2147483647 is out of range (1 to 268435456 fp32 elements)" \
  selftest --iters 1 --count 2147483647
expect 2 "n_layer 2000: at most 1024 layers" train --n-layer 2000 --steps 0
# 0 is accepted (the GPU's datasheet peak), and the refusal says so.
peak="--peak-tflops must be a number of TFLOP/s > 0, or 0 for the GPU's datasheet peak, got -1"
expect 2 "$peak" train --steps 0 --peak-tflops -1
timeout 60 "$shardtrain" train --steps 0 --peak-tflops 0 >/dev/null 2>&1 ||
  { echo "FAIL: train --peak-tflops 0 (the GPU's datasheet peak) is refused"; fail=1; }
expect 2 "--peak-tflops: 'abc' is not a finite number" train --steps 0 --peak-tflops abc
expect 2 "--peak-tflops: 'inf' is not a finite number" train --steps 0 --peak-tflops inf
expect 2 "--nccl-max-ctas must be in 1..32, got 0" train --steps 0 --nccl-max-ctas 0
expect 2 "--nccl-max-ctas must be in 1..32, got 33" train --steps 0 --nccl-max-ctas 33

# The depth bound is a sanity check, not a table: a deep model builds (and exports).
if ! timeout 60 "$shardtrain" train --n-layer 80 --steps 0 --export "$work/deep.safetensors" \
     > "$work/deep.log" 2>&1; then
  echo "FAIL: an 80-layer tiny model was refused:"; cat "$work/deep.log"; fail=1
else
  echo "ok: an 80-layer tiny model builds and exports"
fi

# expect_every_rank RANKS CODE PATTERN ARGS...: on RANKS ranks, within the time limit, every rank
# says PATTERN on one error line and exits with CODE (each_rank.sh).
expect_every_rank() {
  local ranks=$1 code=$2 pattern=$3
  shift 3
  each_rank "shardtrain $* on $ranks ranks" "$ranks" "$code" "$pattern" "$shardtrain" "$@" ||
    fail=1
}

# An impossible mesh, a TP size that does not divide the heads, a GPU asked for where none is
# usable: every rank says so and exits 2, nobody hangs. (A param dtype the device cannot train
# with, fp16 on a GPU older than sm_70, takes the same path; the CPU holds every dtype.)
expect_every_rank 4 2 "needs 6 ranks, world has 4" selftest --dp-shard 3 --tp 2
expect_every_rank 4 2 "needs 6 ranks, world has 4" train --dp-shard 3 --tp 2 --steps 0
expect_every_rank 3 2 "tp 3 does not divide n_head 4" train --tp 3 --steps 0
expect_every_rank 2 2 "device cuda requested but no usable GPU was found" \
  train --device cuda --param-dtype fp16 --zero 3 --steps 0
# The NCCL backend where NCCL cannot join the ranks (here: CPU devices, or a build without NCCL):
# every rank says that the fault is every rank's, not rank 0's alone.
expect_every_rank 2 2 "NCCL cannot join the ranks: every rank (all 2)" \
  selftest --device cpu --backend nccl
# An empty NCCL_HOSTID, which NCCL would take for a host named "" (docs/ENVIRONMENT.md), is refused
# wherever the NCCL backend may be chosen, on a GPU (tests/sharding:collectives_test, --device
# cuda), and ignored on the CPU, where only MPI joins the ranks.
# shellcheck disable=SC1007 # NCCL_HOSTID set to the empty string for one command, on purpose
if ! NCCL_HOSTID= timeout 60 "$mpirun_sh" 2 "$shardtrain" selftest \
     --device cpu --iters 1 --count 16 > "$work/hostid.log" 2>&1; then
  echo "FAIL: an empty NCCL_HOSTID stops a CPU mesh:"; tail -5 "$work/hostid.log"; fail=1
else
  echo "ok: an empty NCCL_HOSTID is ignored on the CPU"
fi
# Tasks a launcher started that MPI did not join (srun without --mpi=pmix) are one-rank worlds:
# each stops instead of training as a job of its own beside the others.
SLURM_STEP_NUM_TASKS=4 expect 2 \
  "launched as one of 4 tasks (SLURM_STEP_NUM_TASKS=4), but MPI put this one in a world of its own" \
  train --steps 0
expect 2 "--param-dtype 'int8' is not a dtype" train --param-dtype int8 --steps 0
expect 2 "--reduce-dtype 'int8' is not a dtype" train --reduce-dtype int8 --steps 0

# Loss scaling: only fp16 scales, and a scale is "dynamic" or a positive fp32 number (train and
# plan alike).
expect 2 "--loss-scale '0' is not dynamic or a positive fp32 number" \
  train --param-dtype fp16 --loss-scale 0 --steps 0
expect 2 "--loss-scale '-8' is not dynamic or a positive fp32 number" \
  train --param-dtype fp16 --loss-scale -8 --steps 0
expect 2 "--loss-scale 'auto' is not dynamic or a positive fp32 number" \
  train --param-dtype fp16 --loss-scale auto --steps 0
expect 2 "--loss-scale '1e39' is not dynamic or a positive fp32 number" \
  train --param-dtype fp16 --loss-scale 1e39 --steps 0
expect 2 "--loss-scale 'nan' is not dynamic or a positive fp32 number" \
  train --param-dtype fp16 --loss-scale nan --steps 0
expect 2 "--loss-scale 1024: only fp16 scales the loss (param bf16, reduce bf16 never do)" \
  train --param-dtype bf16 --reduce-dtype bf16 --loss-scale 1024 --steps 0
expect 2 "--loss-scale dynamic: only fp16 scales the loss (param fp32, reduce fp32 never do)" \
  train --loss-scale dynamic --steps 0
expect 2 "--loss-scale-window must be >= 1, got 0" \
  train --param-dtype fp16 --loss-scale-window 0 --steps 0
# A fixed scale outside 1 to 2^24: NaN parameters below (1/S overflows), no norm (its square
# underflows), a checkpoint its own resume refused above.
expect 2 "--loss-scale 2e38 is out of range: a fixed scale is 1 to 16777216 (2^24)" \
  train --param-dtype fp16 --loss-scale 2e38 --steps 0
expect 2 "--loss-scale 1e-30 is out of range: a fixed scale is 1 to 16777216 (2^24)" \
  train --param-dtype fp16 --loss-scale 1e-30 --steps 0
expect 2 "--loss-scale 0.5 is out of range" plan --param-dtype fp16 --loss-scale 0.5
# A window where no scale doubles would do nothing.
expect 2 "--loss-scale-window 5: only a dynamic loss scale (fp16's default) has a window, and this run's is none" \
  train --loss-scale-window 5 --steps 0
expect 2 "--loss-scale-window 5: only a dynamic loss scale (fp16's default) has a window, and this run's is fixed" \
  train --param-dtype fp16 --loss-scale 8 --loss-scale-window 5 --steps 0
expect 2 "--loss-scale 64: only fp16 scales the loss (param bf16, reduce fp32 never do)" \
  plan --param-dtype bf16 --loss-scale 64
expect 2 "--loss-scale '0.0' is not dynamic or a positive fp32 number" \
  plan --param-dtype fp16 --loss-scale 0.0
expect_every_rank 2 2 "--loss-scale 512: only fp16 scales the loss" \
  train --dp-shard 2 --param-dtype bf16 --loss-scale 512 --steps 0
expect 2 "--offload 'gpu' is not optimizer or none" train --offload gpu --steps 0
expect 2 "--offload 'params' is not optimizer or none" train --offload params --steps 0
expect 2 "--recompute 'all' is not none, gelu or block" train --recompute all --steps 0
expect 2 "--recompute '' is not none, gelu or block" train --recompute= --steps 0
expect 2 "--recompute 'attention' is not none, gelu or block" plan --recompute attention
expect_every_rank 2 2 "--recompute 'GELU' is not none, gelu or block" \
  train --dp-shard 2 --recompute GELU --steps 0

# AdamW's hyperparameters: each beta in [0, 1) also once rounded to fp32, eps > 0 and an fp32.
expect 2 "--beta1 must be in .0, 1), got 1$" train --steps 0 --beta1 1
expect 2 "--beta1 must be in .0, 1), got -0.1" train --steps 0 --beta1 -0.1
expect 2 "--beta2 must be in .0, 1), got 1.5" train --steps 0 --beta2 1.5
expect 2 "--beta2 0.9999999999 rounds to 1 in fp32" train --steps 0 --beta2 0.9999999999
expect 2 "--eps must be > 0, got 0" train --steps 0 --eps 0
expect 2 "--eps must be > 0, got -1e-08" train --steps 0 --eps -1e-8
expect 2 "--eps 1e-60 is outside fp32's range" train --steps 0 --eps 1e-60
expect 2 "--beta1: 'high' is not a finite number" train --steps 0 --beta1 high
expect 2 "--lr must be a finite number > 0, got -1" train --steps 0 --lr -1
expect 2 "--min-lr must lie in \[0, --lr 0.001\], got 0.5" train --steps 0 --min-lr 0.5
# The update runs in fp32 and checkpoints record the values: one above what a checkpoint takes
# (which would train, then refuse to resume), or that rounds to 0 (--clip: no clipping at all).
expect 2 "--lr 2e+09 is above 1e+09, the largest a run takes" train --steps 0 --lr 2e9
expect 2 "--weight-decay 1e+40 is above 1e+09" train --steps 0 --weight-decay 1e40
expect 2 "--clip 2e+38 is above 1e+38" train --steps 0 --clip 2e38
expect 2 "--eps 2 is above 1" train --steps 0 --eps 2
expect 2 "--clip 1e-50 is outside fp32's range" train --steps 0 --clip 1e-50
# A double's subnormal (strtod's ERANGE) is a number, judged by its flag, not "not finite".
expect 2 "--lr 1e-310 is outside fp32's range" train --steps 0 --lr 1e-310

# --init-from a file of another model: refused naming both, not loaded in part. tiny has 2
# layers and 4 heads (recorded in the export's metadata).
if ! timeout 60 "$shardtrain" train --steps 0 --export "$work/tiny2.safetensors" > /dev/null 2>&1; then
  echo "FAIL: the tiny export for --init-from failed"; fail=1
fi
expect 2 "$work/tiny2.safetensors holds tensor 'h.1.attn.c_attn.bias', which the model (n_layer 1)" \
  train --steps 0 --n-layer 1 --init-from "$work/tiny2.safetensors"
expect 2 "$work/tiny2.safetensors: tensor 'h.2.ln_1.weight' is missing" \
  train --steps 0 --n-layer 3 --init-from "$work/tiny2.safetensors"
expect 2 "$work/tiny2.safetensors records n_head 4 (metadata shardtrain.n_head) and the model asks for n_head 8" \
  train --steps 0 --n-head 8 --init-from "$work/tiny2.safetensors"
# --quiet says what it silences: stdout, not the info lines on stderr.
train_help=$("$shardtrain" train --help) # not piped into grep -q: pipefail would see SIGPIPE
grep -q -- "--quiet .*nothing on stdout.*info, warnings and errors still go to stderr" \
  <<<"$train_help" || { echo "FAIL: train --help does not say what --quiet silences"; fail=1; }

# Output paths are checked at start-up, before any step, on the rank that writes them, and
# every rank says so. A check only looks: an export already at its path stays byte for byte
# what it was, and no metrics file is created.
make_shard "$work/shard.bin" 8192
printf 'an earlier export, to be kept' > "$work/kept.safetensors"
cp "$work/kept.safetensors" "$work/kept.orig"
touch -d '2001-01-01' "$work/kept.safetensors"
kept_stamp=$(stat -c %Y "$work/kept.safetensors")
data=(--data-train "$work/shard.bin" --steps 3 --micro-batch 2)
# A run that diverges names the step as the step lines count it (the second: --lr 1e9, the most
# a run takes, moved every weight by about 1e9 in the first).
expect 1 "step 2: loss -*nan, gradient norm -*nan: training diverged" \
  train "${data[@]}" --lr 1e9
# A run ended by --stop-at has not finished: it checkpoints, and leaves --export to the run that
# reaches --steps (as a stop signal does).
if ! timeout 60 "$shardtrain" train "${data[@]}" --ckpt-dir "$work/ck_stop" --stop-at 1 \
     --export "$work/stopped.safetensors" > /dev/null 2>&1 || [ -e "$work/stopped.safetensors" ] ||
   [ ! -e "$work/ck_stop/step_1/DONE" ]; then
  echo "FAIL: --stop-at 1 of 3: want exit 0, step_1 checkpointed and no export"; fail=1
else
  echo "ok: --stop-at 1 of 3 checkpoints step 1 and writes no export"
fi
# --eval-batches far above what the validation data holds (2^31 - 1: evaluating that many held
# the step, and a stop signal, for hours): each evaluation reads the data once, as many batches
# as rank 0's warning names, and gives the val loss of that many.
evaluated() {
  # shellcheck disable=SC2069  # the warnings to the caller, the step lines dropped
  timeout 60 "$shardtrain" train "${data[@]}" --data-val "$work/shard.bin" --eval-batches "$1" \
    --metrics "$work/eval_$1.jsonl" 2>&1 >/dev/null
}
held=$(evaluated 2147483647 | sed -n 's/.*validation data holds \([0-9]*\) batches.*/\1/p')
val_losses() { grep -o '"val_loss": [^,}]*' "$work/eval_$1.jsonl"; }
if [ -z "$held" ] || ! evaluated "$held" >/dev/null || [ -z "$(val_losses "$held")" ] ||
   [ "$(val_losses 2147483647)" != "$(val_losses "$held")" ]; then
  echo "FAIL: --eval-batches 2147483647: warned of '$held' batches, val losses" \
    "$(val_losses 2147483647) against $(val_losses "$held")"
  fail=1
else
  echo "ok: --eval-batches 2147483647 evaluates the $held batches the data holds"
fi
# Validation data that holds fewer sequences than one global batch (1000 tokens: 15 sequences, 7
# micro-batches of 2, against --grad-accum 10) is read in batches of the 7 it holds, with a
# warning, not refused: it suited a smaller --grad-accum.
make_shard "$work/val_small.bin" 1000
# shellcheck disable=SC2069  # the warnings to the caller, the step lines dropped
small_val=$(timeout 60 "$shardtrain" train "${data[@]}" --grad-accum 10 --data-val \
  "$work/val_small.bin" --eval-batches 1 --metrics "$work/val_small.jsonl" 2>&1 >/dev/null)
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "holds 7 micro-batches of 1 x 2 x 64 tokens, fewer than the 10 of one global batch (--grad-accum): each validation batch is those 7" <<<"$small_val" ||
   [ "$(grep -c '"val_loss"' "$work/val_small.jsonl")" -ne 1 ]; then
  echo "FAIL: validation data under one global batch: exit $rc, $small_val"
  fail=1
else
  echo "ok: validation data under one global batch is read in the micro-batches it holds"
fi

# expect_untouched CASE: the existing export and the directory are as they were.
expect_untouched() {
  if ! cmp -s "$work/kept.orig" "$work/kept.safetensors" ||
     [ "$(stat -c %Y "$work/kept.safetensors")" != "$kept_stamp" ]; then
    echo "FAIL: $1: the existing export was modified"; fail=1
  fi
  if [ -e "$work/new.jsonl" ] || compgen -G "$work/kept.safetensors.tmp*" > /dev/null; then
    echo "FAIL: $1: a file was created at start-up"; fail=1
  fi
  rm -f "$work/new.jsonl" "$work"/kept.safetensors.tmp*
}

mkdir -p "$work/adir"
expect 2 "--export $work/missing/model.safetensors: directory $work/missing does not exist" \
  train "${data[@]}" --metrics "$work/new.jsonl" --export "$work/missing/model.safetensors"
expect_untouched "--export in a missing directory"
expect 2 "--export $work/adir is a directory, not a file" \
  train "${data[@]}" --metrics "$work/new.jsonl" --export "$work/adir"
expect_untouched "--export naming a directory"
# A device or a pipe at an output written whole would be replaced by the file (/dev/null too).
mkfifo "$work/apipe"
expect 2 "--export $work/apipe is a pipe, not a file: the file written would replace it" \
  train "${data[@]}" --metrics "$work/new.jsonl" --export "$work/apipe"
[ -p "$work/apipe" ] || { echo "FAIL: the pipe at --export was replaced"; fail=1; }
expect_untouched "--export naming a pipe"
expect 2 "--metrics $work/apipe is a pipe: opening it would wait for a reader" \
  train "${data[@]}" --export "$work/kept.safetensors" --metrics "$work/apipe"
expect_untouched "--metrics naming a pipe"
# A file in --ckpt-dir whose name only begins like a step directory's is no checkpoint.
if ! timeout 60 "$shardtrain" train --steps 0 --ckpt-dir "$work/ck_names" \
     --metrics "$work/ck_names/step_log.jsonl" > /dev/null 2>&1; then
  echo "FAIL: --metrics ck_names/step_log.jsonl was refused"; fail=1
fi
expect 2 "--metrics $work/missing/m.jsonl: directory $work/missing does not exist" \
  train "${data[@]}" --export "$work/kept.safetensors" --metrics "$work/missing/m.jsonl"
expect_untouched "--metrics in a missing directory"
expect 2 "--metrics $work/adir is a directory, not a file" \
  train "${data[@]}" --export "$work/kept.safetensors" --metrics "$work/adir"
expect_untouched "--metrics naming a directory"
expect 2 "--save-init $work/bad.bin/init.safetensors: $work/bad.bin is not a directory" \
  train "${data[@]}" --export "$work/kept.safetensors" --save-init "$work/bad.bin/init.safetensors"
expect_untouched "--save-init under a file"
expect 2 "--save-init $work/adir/ names a directory" \
  train "${data[@]}" --export "$work/kept.safetensors" --save-init "$work/adir/"
expect_untouched "--save-init ending in /"
# A name the file system cannot take: 250 bytes fit its 255 but not with the ".tmp.<pid>" of the
# temporary file a whole export is written to first; an appended file needs no suffix.
long=$(printf 'n%.0s' {1..250})
expect 2 "--export $work/$long: the name has 250 bytes; the file system takes [0-9]* here" \
  train "${data[@]}" --metrics "$work/new.jsonl" --export "$work/$long"
expect_untouched "--export with a name too long"
expect 2 "--metrics $work/$long$long: the name has 500 bytes" \
  train "${data[@]}" --export "$work/kept.safetensors" --metrics "$work/$long$long"
expect_untouched "--metrics with a name too long"
if ! timeout 60 "$shardtrain" train --steps 0 --metrics "$work/$long" > /dev/null 2>&1; then
  echo "FAIL: --metrics with a 250-byte name was refused"; fail=1
fi

# Not one step runs before the refusal (no step line on stdout).
out=$(timeout 60 "$shardtrain" train "${data[@]}" --export "$work/missing/model.safetensors" 2>/dev/null)
if grep -q "^step " <<<"$out"; then
  echo "FAIL: a step ran before the unwritable --export was refused:"; echo "$out"; fail=1
fi

expect_every_rank 2 2 "--export $work/missing/model.safetensors: directory $work/missing does" \
  train "${data[@]}" --metrics "$work/new.jsonl" --export "$work/missing/model.safetensors"
expect_untouched "--export in a missing directory, 2 ranks"
expect_every_rank 2 2 "--metrics $work/adir is a directory, not a file" \
  train "${data[@]}" --export "$work/kept.safetensors" --metrics "$work/adir"
expect_untouched "--metrics naming a directory, 2 ranks"
expect_every_rank 2 2 "--save-init $work/missing/init.safetensors: directory $work/missing does" \
  train "${data[@]}" --export "$work/kept.safetensors" --save-init "$work/missing/init.safetensors"
expect_untouched "--save-init in a missing directory, 2 ranks"
# An output that stops taking writes (a full disk; here rank 0 may write no file past 2 KiB):
# rank 0 alone finds out, and every rank stops with its line and exit code 1, a failure while
# running, not bad input (none is left waiting in the next collective for the job's abort). The
# metrics file fills up mid-run, --save-init's file (485 KB) before the first step; a whole file
# is written under a temporary name, which is removed.
# fills_up WHAT FILE ARGS...
fills_up() {
  local what=$1 file=$2
  shift 2
  # Rank 1 reports rank 0's failure as such. TCP between the ranks: the limit would stop rank 0
  # sizing a shared-memory segment.
  # shellcheck disable=SC2016  # the inner script expands its own variables, on each rank
  OMPI_MCA_btl=self,tcp each_rank "$what$file fills up on rank 0" 2 1 \
    "error: shardtrain train: \(on world rank 0: \)\{0,1\}$what$file: write failed" \
    bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then trap "" XFSZ; ulimit -f 2; fi; exec "$@"' \
    full "$shardtrain" train "${data[@]}" --steps 10 "$@" || fail=1
  if compgen -G "$file.tmp*" >/dev/null; then
    echo "FAIL: $what$file fills up on rank 0: temporary files left: $(compgen -G "$file.tmp*")"
    fail=1
  fi
}
fills_up "--metrics " "$work/full.jsonl" --metrics "$work/full.jsonl"
fills_up "" "$work/full.safetensors" --save-init "$work/full.safetensors"

# Each rank globs --data-train itself: ranks started in other directories (as on other nodes)
# whose relative pattern matches other shards are refused on every rank, naming the rank.
mkdir -p "$work/node0/data" "$work/node1/data"
make_shard "$work/node0/data/a.bin" 8192
make_shard "$work/node1/data/a.bin" 8192
make_shard "$work/node1/data/b.bin" 8192
printf '#!/bin/sh\ncd "%s/node$OMPI_COMM_WORLD_RANK" && exec "$@"\n' "$work" > "$work/per_rank_cwd"
chmod +x "$work/per_rank_cwd"
each_rank "ranks whose --data-train matches other shards" 2 2 \
  "--data-train data/\*.bin matches other shards on world rank 1 (host .*, 2 files) than on world rank 0 (1 files)" \
  "$work/per_rank_cwd" "$(realpath "$shardtrain")" train --data-train 'data/*.bin' --steps 1 \
  --micro-batch 2 || fail=1

# An unknown log level is said, not taken silently for info.
out=$(ST_LOG_LEVEL=bogus timeout 60 "$shardtrain" train --steps 0 2>&1 >/dev/null)
if ! grep -q "ST_LOG_LEVEL='bogus' is not error, warn, info or debug; logging at info" <<<"$out"; then
  echo "FAIL: ST_LOG_LEVEL=bogus: no warning, stderr: $out"; fail=1
else
  echo "ok: ST_LOG_LEVEL=bogus is warned of"
fi

# --help documents every flag the parser accepts.
help=$("$shardtrain" train --help)
for f in model n-layer n-head n-embd vocab seq-len data-train data-val micro-batch grad-accum \
         steps lr warmup lr-schedule decay-steps weight-decay clip beta1 beta2 eps seed init-from \
         save-init export metrics quiet log-every eval-every eval-batches device zero dp-replicate \
         dp-shard tp prefetch reshard-after-forward param-dtype reduce-dtype offload no-fit-check \
         ckpt-dir ckpt-every keep ckpt-async resume resume-from stop-at; do
  grep -q -- "--$f " <<<"$help" || { echo "FAIL: train --help lacks --$f"; fail=1; }
done

[ $fail -eq 0 ] && echo "cli_errors_test: passed" || echo "cli_errors_test: FAILED"
exit $fail
