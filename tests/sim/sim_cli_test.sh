#!/usr/bin/env bash
# `shardtrain simulate`, `shardtrain plan --fit` and plan's offload and checkpoints: bad input
# gives one error line naming the problem and exit code 2 (an unknown GPU, a hardware file with a
# missing or negative field, a mesh that does not divide the GPUs, ...); good input prints the
# breakdown, a CSV, a sweep and the train flags of the best fit.
set -uo pipefail
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
shardtrain=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
fail=0

# expect CODE PATTERN ARGS...: exit CODE and exactly one stderr line matching PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 2
  local err rc lines
  err=$(timeout 60 "$shardtrain" "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne "$code" ] || ! grep -q -- "$pattern" <<<"$err" || [ "$lines" -ne 1 ]; then
    echo "FAIL: shardtrain $* -> exit $rc (want $code), $lines error lines:"
    echo "$err"
    fail=1
  else
    echo "ok: shardtrain $* -> $rc: $err"
  fi
}

good="$work/good.hw"
cat > "$good" <<'HW'
# a small machine
name = test-node
peak_flops = 1e12
mem_bw = 1e11
intra_bw = 1e10
intra_latency = 1e-6
inter_bw = 1e9
inter_latency = 1e-5
gpus_per_node = 4
HW
grep -v '^mem_bw' "$good" > "$work/missing.hw"
sed 's/^inter_bw = .*/inter_bw = -5/' "$good" > "$work/negative.hw"
sed 's/^peak_flops = .*/peak_flops = fast/' "$good" > "$work/word.hw"
printf 'peak_flops = 1\nfrobs = 2\n' > "$work/unknown.hw"
{ cat "$good"; echo "eff_reduce_scatter@2 = 4194304:0.3 1048576:0.4"; } > "$work/curve.hw"
{ cat "$good"; echo "eff_matmul = 1e-6:0.3 1e-3:0"; } > "$work/class_curve.hw"

expect 2 "--gpu 'v100' is not one of h100, h200, a100" simulate --gpu v100
expect 2 "missing required key 'mem_bw'" simulate --hardware "$work/missing.hw"
expect 2 "inter_bw = '-5' is not a finite number >= 0" simulate --hardware "$work/negative.hw"
expect 2 "peak_flops = 'fast' is not a finite number" simulate --hardware "$work/word.hw"
expect 2 "unknown key 'frobs'" simulate --hardware "$work/unknown.hw"
expect 2 "eff_reduce_scatter@2: size 1.04858e+06 of point 2 must be > 0 and above the last" \
  simulate --hardware "$work/curve.hw"
expect 2 "class_curve.hw line 10: eff_matmul: efficiency 0 of point 2 must be > 0" \
  simulate --hardware "$work/class_curve.hw"
expect 2 "$work/none.hw: cannot open" simulate --hardware "$work/none.hw"
expect 2 "--hardware $work is a directory, not a hardware file" simulate --hardware "$work"
sed 's/^gpus_per_node = .*/gpus_per_node = 0/' "$good" > "$work/zero_gpus.hw"
expect 2 "zero_gpus.hw line 9: gpus_per_node = 0 must be 1 to 1048576\$" \
  simulate --hardware "$work/zero_gpus.hw"
# Every value the check refuses is named with the file and the line that set it (more cases:
# tests/sim/sim_curve_test).
sed 's/^peak_flops = .*/peak_flops = 0/' "$good" > "$work/zero_peak.hw"
expect 2 "zero_peak.hw line 3: peak_flops = 0 must be > 0\$" \
  simulate --hardware "$work/zero_peak.hw"
# A line longer than the reader's buffer is refused: its tail once read as a line of its own (a
# comment of 1022 characters set op_overhead).
{ cat "$good"; head -c 1022 /dev/zero | tr '\0' '#'; echo " op_overhead = 0.001"; } \
  > "$work/long.hw"
expect 2 "long.hw line 10: longer than 1023 characters" simulate --hardware "$work/long.hw"
# Results that are not finite numbers, or would pass the peak, are not reported.
{ cat "$good"; echo "op_overhead = 1e308"; } > "$work/overhead.hw"
expect 2 "hardware 'test-node' predicts a step of inf s" simulate --hardware "$work/overhead.hw"
expect 2 "hardware 'h100' predicts a step of .* at MFU 0: not a finite time" \
  simulate --gpu h100 --efficiency-scale 1e-300
mfu() { "$shardtrain" simulate "$@" | awk '$1 == "MFU" { print $2 }'; }
{ cat "$good"; echo "eff_matmul = 5"; } > "$work/fast.hw"
for run in "--hardware $work/fast.hw" "--gpu h100 --efficiency-scale 3"; do
  # shellcheck disable=SC2086
  m=$(mfu $run)
  awk -v m="$m" 'BEGIN { exit !(m > 0 && m <= 100) }' ||
    { echo "FAIL: simulate $run: MFU '$m' %, above the peak"; fail=1; }
done
{ cat "$good"; echo "mem_bw = 2e11"; } > "$work/twice.hw"
expect 2 "twice.hw line 10: key 'mem_bw' is given twice (first on line 4)" \
  simulate --hardware "$work/twice.hw"
expect 2 "give one of --gpu NAME or --hardware FILE" simulate
expect 2 "give one of --gpu NAME or --hardware FILE" simulate --gpu h100 --hardware "$good"
expect 2 "mesh 3x?x1 does not divide 8 GPUs" simulate --gpu h100 --dp-replicate 3
expect 2 "mesh 1x3x2 needs 6 GPUs, the cluster has 8" simulate --gpu h100 --dp-shard 3 --tp 2
expect 2 "mesh 1x1x1 needs 1 GPU, the cluster has 8" simulate --gpu h100 --dp-shard 1
# A size above the GPU count is refused before the product is taken (8 x 536870913 wrapped to 8).
expect 2 "--dp-shard 536870913 is more than the cluster's 8 GPUs" simulate --gpu h100 \
  --dp-replicate 8 --dp-shard 536870913
expect 2 "--tp 16 is more than the cluster's 8 GPUs" simulate --gpu h100 --tp 16
expect 2 "--dp-replicate 2 is more than the cluster's 1 GPU\$" simulate --gpu h100 \
  --gpus-per-node 1 --dp-replicate 2
expect 2 "mesh ?x3x1 does not divide 16 GPUs" simulate --gpu h100 --nodes 2 --dp-replicate 0 \
  --dp-shard 3
expect 2 "tp 5 does not divide n_head 12" simulate --gpu h100 --tp 5 --gpus-per-node 5
expect 2 "--zero 4 is not 0-3" simulate --gpu h100 --zero 4
expect 2 "--nodes 0 is out of range (1 to 1048576)" simulate --gpu h100 --nodes 0
# GPU counts: at most 2^20, the product checked in 64 bits (no wrap, no hang), nothing printed.
expect 2 "--gpus-per-node 2147483647 is out of range (1 to 1048576)" \
  simulate --model tiny --gpu h100 --gpus-per-node 2147483647
expect 2 "--nodes 2147483647 is out of range (1 to 1048576)" \
  simulate --model tiny --gpu h100 --nodes 2147483647
expect 2 "46341 nodes of 46341 GPUs is 2147488281 GPUs, more than the 1048576" \
  simulate --model tiny --gpu h100 --gpus-per-node 46341 --nodes 46341
expect 2 "--ranks 2147483647 is out of range (1 to 1048576)" plan --ranks 2147483647
[ -z "$("$shardtrain" plan --ranks 2147483647 2>/dev/null)" ] ||
  { echo "FAIL: plan --ranks 2147483647 printed before its error"; fail=1; }
expect 2 "--gpus 8 is not a whole number of nodes of 3 GPUs" plan --fit --gpu h100 --gpus 8 \
  --gpus-per-node 3
expect 2 "--gpus 2000000 is out of range (1 to 1048576)" plan --fit --gpu h100 --gpus 2000000
expect 2 "--global-batch 1e+20 is out of range" plan --fit --gpu h100 \
  --global-batch 99999999999999999999
# Nothing admissible is not a memory problem: the batch does not split over the GPUs.
expect 2 "global batch of 512 sequences cannot be split evenly over 7 GPUs" \
  plan --fit --model d12 --gpu h100 --gpus 7
expect 2 "global batch of 1 sequences cannot be split evenly over 8 GPUs" \
  plan --fit --model d12 --gpu h100 --global-batch 1024
[ -z "$("$shardtrain" plan --fit --model d12 --gpu h100 --gpus 7 2>/dev/null)" ] ||
  { echo "FAIL: plan --fit --gpus 7 printed before its error"; fail=1; }
expect 2 "--param-dtype 'fp8' is not a dtype" simulate --gpu h100 --param-dtype fp8
expect 2 "--reduce-dtype 'half' is not a dtype" plan --fit --gpu h100 --reduce-dtype half
expect 2 "--sweep: '12' is not a GPU count" simulate --gpu h100 --sweep 8,12
expect 2 "--configs: 'zero7' is not zero0-zero3 or hsdp0-hsdp3" simulate --gpu h100 --sweep 8 \
  --configs zero7
expect 2 "--sweep '': empty item" simulate --gpu h100 --sweep= --configs zero1
expect 2 "--configs ',': empty item" simulate --gpu h100 --sweep 8 --configs ,
expect 2 "--sweep '8,,16': empty item" simulate --gpu h100 --sweep 8,,16
expect 2 "--sweep: ' 8' is not a GPU count" simulate --gpu h100 --sweep " 8"
expect 2 "--sweep: '+8' is not a GPU count" simulate --gpu h100 --sweep +8
expect 2 "--configs: 'zero 1' is not zero0-zero3" simulate --gpu h100 --sweep 8 --configs "zero 1"
expect 2 "--configs: 'hsdp+1' is not zero0-zero3" simulate --gpu h100 --sweep 8 --configs hsdp+1
expect 2 "--configs 'zero1' needs --sweep" simulate --gpu h100 --configs zero1
# A refused sweep prints nothing and leaves an existing --csv file as it was.
echo "keep me" > "$work/keep.csv"
for bad in "--sweep 8,x" "--sweep 12" "--sweep 8,16 --configs hsdp3,foo"; do
  # shellcheck disable=SC2086
  out=$("$shardtrain" simulate --model tiny --gpu h100 $bad --csv "$work/keep.csv" 2>/dev/null)
  rc=$?
  if [ "$rc" -ne 2 ] || [ -n "$out" ] || [ "$(cat "$work/keep.csv")" != "keep me" ] ||
    compgen -G "$work/keep.csv.tmp*" > /dev/null; then
    echo "FAIL: simulate $bad --csv: exit $rc, stdout '$out', csv now: $(head -2 "$work/keep.csv")"
    fail=1
  fi
done
expect 2 "--efficiency-scale must be > 0, got 0" simulate --gpu h100 --efficiency-scale 0
expect 2 "--offload 'disk' is not optimizer or none" simulate --gpu h100 --offload disk
expect 2 "--recompute 'mlp' is not none, gelu or block" simulate --gpu h100 --recompute mlp
expect 2 "hardware 'test-node' gives no host_link_bw and host_mem_bw" \
  simulate --hardware "$good" --offload optimizer
expect 2 "--gpu 'tpu' is not one of" plan --fit --gpu tpu
expect 2 "missing required key 'mem_bw'" plan --fit --hardware "$work/missing.hw" --gpu-gib 8
expect 2 "--global-batch 1000 tokens is not a whole number of 1024-token sequences" \
  plan --fit --gpu h100 --global-batch 1000
expect 2 "no configuration of d48 fits in 1.0 GiB per GPU" plan --fit --gpu h100 --model d48 \
  --gpu-gib 1
expect 2 "no configuration of d48 fits in 1.0 GiB per GPU on 1 GPU with" plan --fit --gpu h100 \
  --model d48 --gpu-gib 1 --gpus 1
expect 2 "--gpu-gib: the hardware 'test-node' does not say its memory" \
  plan --fit --hardware "$good"
# A negative memory is a bad value, not "no verdict" (plan) or "the hardware's" (plan --fit).
expect 2 "--gpu-gib must be >= 0 (0: no verdict), got -1" plan --gpu-gib -1
expect 2 "--gpu-gib must be >= 0 (0: the hardware's), got -0.5" plan --fit --gpu h100 --gpu-gib -0.5
# The batch flags are train's: plan and simulate never predict a run that train refuses (at most
# 64 micro-batches a step; 64 itself runs).
expect 2 "--grad-accum 65: at most 64" simulate --gpu h100 --grad-accum 65
expect 2 "--grad-accum 65: at most 64" plan --grad-accum 65
expect 2 "--micro-batch must be >= 1, got 0" simulate --gpu h100 --micro-batch 0
expect 2 "--prefetch must be >= 0, got -1" plan --prefetch -1
"$shardtrain" simulate --gpu h100 --grad-accum 64 > /dev/null ||
  { echo "FAIL: simulate refuses --grad-accum 64, which train runs"; fail=1; }
"$shardtrain" plan --grad-accum 64 > /dev/null ||
  { echo "FAIL: plan refuses --grad-accum 64, which train runs"; fail=1; }

# Good input: the breakdown, the CSV, a sweep, the fit's train flags.
out=$("$shardtrain" simulate --hardware "$good" --nodes 2 --model tiny --zero 3 --csv "$work/run.csv")
rc=$?
for want in "step time" "exposed comm" "MFU" "tokens/s" "memory per rank" "mesh 1x8x1"; do
  grep -q -- "$want" <<<"$out" || { echo "FAIL: simulate output lacks '$want' (exit $rc):"; echo "$out"; fail=1; }
done
[ "$(wc -l < "$work/run.csv")" -eq 2 ] && head -1 "$work/run.csv" | grep "^label,model,hardware,gpus" > /dev/null ||
  { echo "FAIL: simulate --csv did not write a header and one row"; cat "$work/run.csv"; fail=1; }
# Free text is quoted as RFC 4180 asks: a label and a hardware name with commas and quotes.
sed 's/^name = .*/name = x,y/' "$good" > "$work/comma.hw"
"$shardtrain" simulate --hardware "$work/comma.hw" --model tiny --label 'a,b"c' \
  --csv "$work/quoted.csv" > /dev/null
sed -n 2p "$work/quoted.csv" | grep '^"a,b""c",tiny,"x,y",4,4,1,4,1,' > /dev/null ||
  { echo "FAIL: simulate --csv does not quote its text:"; cat "$work/quoted.csv"; fail=1; }
# --csv never replaces the --hardware file, by any path to it.
cp "$good" "$work/in.hw"
ln -sf "$work/in.hw" "$work/link.hw"
expect 2 "--csv $work/link.hw is the --hardware file $work/in.hw" \
  simulate --hardware "$work/in.hw" --csv "$work/link.hw"
cmp -s "$good" "$work/in.hw" ||
  { echo "FAIL: simulate --csv replaced its --hardware file"; fail=1; }
"$shardtrain" simulate --gpu h100 --model d12 --micro-batch 8 --sweep 8,16,64 \
  --configs zero1,hsdp3 --csv "$work/sweep.csv" > "$work/sweep.txt" 2>&1 ||
  { echo "FAIL: sweep exited $?"; cat "$work/sweep.txt"; fail=1; }
[ "$(wc -l < "$work/sweep.csv")" -eq 7 ] ||
  { echo "FAIL: a sweep of 3 GPU counts x 2 configs wrote $(wc -l < "$work/sweep.csv") lines"; fail=1; }
# --fit is a switch like any other: =1 turns it on, =false leaves plan's table, a word is refused.
expect 2 "--fit: 'maybe' is not true or false" plan --fit=maybe
"$shardtrain" plan --fit=1 --gpu h100 --model d12 --gpus 8 --top 1 2>&1 | grep "^run it with:" > /dev/null ||
  { echo "FAIL: plan --fit=1 did not choose a configuration"; fail=1; }
"$shardtrain" plan --fit=false --model d12 --ranks 2 2>&1 | grep "^R x S" > /dev/null ||
  { echo "FAIL: plan --fit=false did not print plan's table"; fail=1; }
fit=$("$shardtrain" plan --fit --gpu h100 --model d12 --gpus 16 --global-batch 524288 --top 3)
grep -q -- "mpirun -np 16 shardtrain train --model d12 --zero [0-3] --dp-replicate.* --recompute \(none\|gelu\|block\) ..." <<<"$fit" ||
  { echo "FAIL: plan --fit printed no train command:"; echo "$fit"; fail=1; }
grep -q -- "not searched" <<<"$fit" && { echo "FAIL: plan --fit still leaves something out:"; echo "$fit"; fail=1; }
[ "$(grep -cE '^ +[0-9]+ [0-9]+x[0-9]+x[0-9]+ ' <<<"$fit")" -eq 3 ] ||
  { echo "FAIL: plan --fit --top 3 did not list 3 configurations:"; echo "$fit"; fail=1; }
out=$("$shardtrain" simulate --gpu h100 --model d12 --zero 1 --offload optimizer)
grep -q -- "on the device [0-9.]*, on the host [0-9.]*" <<<"$out" ||
  { echo "FAIL: simulate --offload optimizer does not split device and host memory:"; echo "$out"; fail=1; }
"$shardtrain" simulate --help | grep -- "--hardware " > /dev/null || { echo "FAIL: simulate --help"; fail=1; }

# A class curve below its constant's 0.9 at small calls costs the matmuls more; --efficiency-scale
# 0.5 doubles them on the curve too.
matmul_ms() {
  { cat "$good"; echo "eff_matmul = $1"; } > "$work/matmul.hw"
  shift
  "$shardtrain" simulate --hardware "$work/matmul.hw" --model tiny "$@" |
    awk '$1 == "matmul" { print $2; exit }'
}
flat=$(matmul_ms 0.9) curved=$(matmul_ms "1e-6:0.3 1e-3:0.9")
halved=$(matmul_ms "1e-6:0.3 1e-3:0.9" --efficiency-scale 0.5)
awk -v f="$flat" -v c="$curved" -v h="$halved" \
  'BEGIN { exit !(f > 0 && c > 1.1 * f && h > 1.97 * c && h < 2.03 * c) }' ||
  { echo "FAIL: matmul ms at 0.9: $flat, on the curve: $curved, scaled by 0.5: $halved"; fail=1; }

# fp16 is simulated and fitted with bf16's memory (tests/sim/gpu_plan_test checks the bytes).
mem_of() { grep -o "memory per rank *[0-9.]* GiB ([^)]*)" <<<"$1"; }
bf16=$("$shardtrain" simulate --gpu h100 --model d12 --zero 3)
fp16=$("$shardtrain" simulate --gpu h100 --model d12 --zero 3 --param-dtype fp16 --reduce-dtype fp16)
[ -n "$(mem_of "$bf16")" ] && [ "$(mem_of "$bf16")" = "$(mem_of "$fp16")" ] ||
  { echo "FAIL: simulate fp16's memory differs from bf16's:"; echo "$bf16"; echo "$fp16"; fail=1; }
fit=$("$shardtrain" plan --fit --gpu h100 --model d12 --gpus 8 --param-dtype fp16 \
  --reduce-dtype fp16 --top 1)
grep -q -- "--param-dtype fp16 --reduce-dtype fp16" <<<"$fit" ||
  { echo "FAIL: plan --fit with fp16 printed no fp16 train command:"; echo "$fit"; fail=1; }

# A GPU (the CUDA backend's facts, in every build) takes bf16 parameters with fp32 gradients,
# planned at 4 bytes per gradient (twice bf16's), and refuses fp16 parameters with bf16 gradients
# (gpt_create): plan, simulate and plan --fit refuse to plan that run too, as train would.
grads_of() { "$shardtrain" plan --device cuda "$@" | awk '$1 == "1" && $4 == "0" { print $6; exit }'; }
g32=$(grads_of --param-dtype bf16) g16=$(grads_of --param-dtype bf16 --reduce-dtype bf16)
awk -v a="$g32" -v b="$g16" 'BEGIN { exit !(b > 0 && a > 1.99 * b && a < 2.01 * b) }' ||
  { echo "FAIL: plan bf16/fp32 grads $g32 GiB, bf16/bf16 $g16 GiB: expected twice"; fail=1; }
"$shardtrain" simulate --gpu h100 --reduce-dtype fp32 > /dev/null ||
  { echo "FAIL: simulate refuses bf16 params with fp32 gradients"; fail=1; }
mixed="params in fp16 and gradients in bf16: the cuda kernels write a weight's gradient in fp16"
expect 2 "$mixed" plan --param-dtype fp16 --reduce-dtype bf16
expect 2 "$mixed" simulate --gpu h100 --param-dtype fp16 --reduce-dtype bf16
expect 2 "$mixed" plan --fit --gpu h100 --param-dtype fp16 --reduce-dtype bf16

# plan --offload optimizer: on a GPU, every row's optimizer leaves the device for the host with
# the staging (a ring of at most 4 x 2^20 elements of bf16 gradients and parameters: 16 MiB),
# the rest of the device's memory unchanged; columns 7, 10 and 11 are optim, device and host
# (GiB, 3 decimals, so sums agree within 0.002).
rows() { "$shardtrain" plan --model d12 --ranks 4 --param-dtype bf16 --reduce-dtype bf16 "$@" |
  awk '$2 == "x" && $1 ~ /^[0-9]+$/ { print $7, $10, $11 }'; }
paste -d ' ' <(rows) <(rows --offload optimizer) | awk '
  { n++; staging = ($6 - $3) - $1
    if ($4 != 0 || ($2 - $1 - $5)^2 > 0.002^2 || staging < -0.002 || staging > 16 / 1024 + 0.002) bad++ }
  END { exit !(n == 12 && !bad) }' ||
  { echo "FAIL: plan --offload optimizer does not move the optimizer and staging to the host:";
    paste -d ' ' <(rows) <(rows --offload optimizer); fail=1; }
expect 2 "--offload 'cpu' is not optimizer or none" plan --offload cpu

# plan --ckpt (a run with train's --ckpt-dir): every row's host memory grows by a save's staging,
# 1 MiB (0.001 GiB at 3 decimals), the device's not at all (columns 10 and 11 as above); the
# header says so. tests/sim/gpu_plan_test checks the bytes.
rows() { "$shardtrain" plan --model tiny --ranks 4 --device cuda "$@" |
  awk '$2 == "x" && $1 ~ /^[0-9]+$/ { print $10, $11 }'; }
paste -d ' ' <(rows) <(rows --ckpt) | awk '
  { n++; if ($3 != $1 || $4 - $2 < 0.0005 || $4 - $2 > 0.0015) bad++ }
  END { exit !(n == 12 && !bad) }' ||
  { echo "FAIL: plan --ckpt does not add a save's 1 MiB staging to the host memory:";
    paste -d ' ' <(rows) <(rows --ckpt); fail=1; }
"$shardtrain" plan --model tiny --ckpt | grep "^shardtrain plan: .*, checkpoints yes$" > /dev/null ||
  { echo "FAIL: plan --ckpt's header does not say the run checkpoints"; fail=1; }
"$shardtrain" plan --model tiny --ckpt-async |
  grep -q "^shardtrain plan: .*, checkpoints in the background$" ||
  { echo "FAIL: plan --ckpt-async's header does not say the run saves in the background"; fail=1; }
"$shardtrain" plan --model tiny | grep "^shardtrain plan: .*, checkpoints no$" > /dev/null ||
  { echo "FAIL: plan's header does not say the run saves no checkpoints"; fail=1; }

# plan's header cites its formulas where the repository holds them: docs/SHARDING.md, "ZeRO
# stages" (DESIGN.md, which it once named, is not in the repository).
header=$("$shardtrain" plan --model tiny | sed -n 2,3p)
"$shardtrain" plan --model tiny --ranks 1 |
  grep -q "^shardtrain plan: model tiny (0.1 M parameters), 1 rank, " ||
  { echo "FAIL: plan --ranks 1's header does not say 1 rank"; fail=1; }
grep -qF 'next to the formula of docs/SHARDING.md ("ZeRO stages")' <<<"$header" &&
  ! grep -q "DESIGN" <<<"$header" ||
  { echo "FAIL: plan's header does not cite docs/SHARDING.md for its formulas:"; echo "$header";
    fail=1; }

[ $fail -eq 0 ] && echo "sim_cli_test: passed" || echo "sim_cli_test: FAILED"
exit $fail
