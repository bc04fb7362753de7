# shellcheck shell=bash disable=SC2154  # shardtrain, prepare, mpirun_sh: set by the sourcing test
# train_runs.sh - sourced by the end-to-end training tests. Needs $shardtrain, $prepare and
# $mpirun_sh; prepares the byte data in $work (with the flags of prepare_bytes.py in
# $train_data_flags, when the sourcing test sets it) and defines
#   run NAME RANKS ARGS...
# which trains the tiny GPT 10 steps (the flags in $common, then ARGS) on RANKS ranks and
# writes $work/NAME.jsonl (metrics), $work/NAME.safetensors (export) and $work/NAME.log; a
# run that exits non-zero fails the test, printing its log. And fail MESSAGE: prints
# "FAIL: MESSAGE" and ends the test with exit 1.
work=${TEST_TMPDIR:-$(mktemp -d)}
# shellcheck disable=SC2086 # the flags are words
python3 "$prepare" --out-dir "$work/data" ${train_data_flags:-} > /dev/null || exit 1
common=(train --model tiny --data-train "$work/data/bytes_train_*.bin" --steps 10 --lr 3e-3
        --warmup 3 --min-lr 3e-4 --seed 7)

run() {
  local name=$1 ranks=$2
  shift 2
  # shellcheck disable=SC2086 # both variables are lists of words on purpose
  if ! "$mpirun_sh" "$ranks" ${TRAIN_RUN_WRAPPER:-} "$shardtrain" "${common[@]}" \
       --metrics "$work/$name.jsonl" --export "$work/$name.safetensors" "$@" ${TRAIN_RUN_FLAGS:-} \
       > "$work/$name.log" 2>&1; then
    echo "FAIL: $name exited non-zero"; cat "$work/$name.log"; exit 1
  fi
}

fail() { echo "FAIL: $*"; exit 1; }
