#!/usr/bin/env bash
# `shardtrain train`, driven only by its flags, reproduces the golden file: the loss, the
# gradient norm and the lr of each of the 5 steps (relative 1e-5, 1e-5, 1e-6), the token count
# and fp32 dtypes of each metrics line, and the exported weights (1e-4 per tensor, Frobenius).
# golden_test.c checks the engine with hand-built hyperparameters; this checks what the CLI
# derives from its flags (the loss scale from the token count, the schedule, clipping, decay).
# Runs: one rank, and a tensor-parallel mesh at stage 3 on 2 and 4 ranks, each reading the golden
# batch's 4 sequences (a shard each, see golden_cli.py) as 4 micro-batches; the equivalence test
# holds data-parallel meshes to the single-rank run.
set -uo pipefail
shardtrain=$1
mpirun_sh=$2
golden=$3
helper=$4
work=${TEST_TMPDIR:-$(mktemp -d)}

mapfile -t flags < <(python3 "$helper" prepare "$golden" "$work")
[ "${#flags[@]}" -gt 0 ] || { echo "FAIL: golden_cli.py prepare"; exit 1; }
fail=0
runs=("one 1" "tp2_z3 2 --tp 2 --zero 3" "tp4_z3 4 --tp 4 --zero 3")
for spec in "${runs[@]}"; do
  read -r name ranks mesh <<<"$spec"
  # shellcheck disable=SC2086 # the mesh flags are words on purpose
  if ! "$mpirun_sh" "$ranks" "$shardtrain" train "${flags[@]}" $mesh --metrics "$work/$name.jsonl" \
       --export "$work/$name.safetensors" > "$work/$name.log" 2>&1; then
    echo "FAIL: $name exited non-zero"; cat "$work/$name.log"; fail=1; continue
  fi
  echo "$name ($ranks ranks${mesh:+, $mesh}):"
  python3 "$helper" check "$golden" "$work/$name.jsonl" "$work/$name.safetensors" || fail=1
done
echo "cli_golden_test:" "$([ $fail -eq 0 ] && echo passed || echo FAILED)"
exit $fail
