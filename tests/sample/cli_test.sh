#!/usr/bin/env bash
# `shardtrain sample` end to end: a model exported by `train` samples with no extra flags; greedy
# and seeded runs repeat; top-k 1 is greedy; generation stops at the model's last position and
# says so; n_head comes from the export's metadata, else the named config of the file's shape,
# else --n-head; ids print as ids, or as text through an llm.c tokenizer file. Then bad input:
# each case exits 2 with exactly one error line naming the flag or file and the problem (a file
# describing a model larger than its tensors before anything is allocated).
set -uo pipefail
shardtrain=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
fail=0

ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# train starts MPI even on one rank: under --config=asan, leak detection is off for it as for
# every MPI program (tests/mpirun.sh says why). sample does not start MPI and keeps it on.
train() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$shardtrain" train "$@"; }

# sample NAME ARGS...: runs sample, stdout to $work/NAME.out, stderr to $work/NAME.err.
sample() {
  local name=$1
  shift
  timeout 120 "$shardtrain" sample "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { bad "sample $* -> exit $rc:"; cat "$work/$name.err"; }
}

same() { cmp -s "$work/$1.out" "$work/$2.out"; }

# Python rewrites safetensors headers and writes tokenizer files, apart from the code under test.
strip_metadata() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
header.pop("__metadata__", None)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
}

# write_tokenizer PATH VOCAB [MAGIC]: token i is the text "<i>"; version 2, eot the last token.
write_tokenizer() {
  python3 - "$1" "$2" "${3:-20240328}" <<'PY'
import struct, sys
path, vocab, magic = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
header = [magic, 2, vocab, vocab - 1] + [0] * 252
body = b"".join(bytes([len(t)]) + t for t in (f"<{i}>".encode() for i in range(vocab)))
open(path, "wb").write(struct.pack("<256I", *header) + body)
PY
}

train --steps 0 --export "$work/tiny.safetensors" >/dev/null 2>&1 || bad "tiny export"
# Not a named config's shape (those are matched by n_layer and n_embd).
train --steps 0 --vocab 300 --n-embd 48 --n-head 2 --seed 7 --export "$work/v300.safetensors" \
  >/dev/null 2>&1 || bad "vocab-300 export"

# A byte model samples with no extra flags; the text starts with the prompt.
sample greedy --from "$work/tiny.safetensors" --prompt "Hello" --tokens 20 --temperature 0
sample greedy2 --from "$work/tiny.safetensors" --prompt "Hello" --tokens 20 --temperature 0
size=$(wc -c <"$work/greedy.out")
if [ "$(head -c 5 "$work/greedy.out")" = "Hello" ] && [ "$size" -eq 26 ]; then
  ok "greedy: the prompt, 20 bytes and a newline"
else
  bad "greedy output is $size bytes:"; od -c "$work/greedy.out" | head
fi
same greedy greedy2 && ok "greedy repeats" || bad "greedy differs between runs"
sample top1 --from "$work/tiny.safetensors" --prompt "Hello" --tokens 20 --top-k 1 --seed 3
same greedy top1 && ok "top-k 1 is greedy" || bad "top-k 1 differs from greedy"
sample seed5 --from "$work/tiny.safetensors" --prompt "Hello" --tokens 20 --seed 5
sample seed5b --from "$work/tiny.safetensors" --prompt "Hello" --tokens 20 --seed 5
sample seed6 --from "$work/tiny.safetensors" --prompt "Hello" --tokens 20 --seed 6
same seed5 seed5b && ok "seed 5 repeats" || bad "seed 5 differs between runs"
same seed5 seed6 && bad "seeds 5 and 6 give the same text" || ok "seeds 5 and 6 differ"

# tiny has 64 positions: 5 prompt bytes leave room for 59 tokens.
sample full --from "$work/tiny.safetensors" --prompt "Hello" --tokens 100 --temperature 0
if grep -q "stopped after 59 of 100 tokens: the sequence fills the model's 64 positions" \
     "$work/full.err" && [ "$(wc -c <"$work/full.out")" -eq 65 ]; then
  ok "stops at the model's 64 positions and says so"
else
  bad "no stop at 64 positions:"; cat "$work/full.err"
fi
grep -q stopped "$work/greedy.err" && bad "a run with room to spare says it stopped"
# One token is counted as one.
sample one --from "$work/tiny.safetensors" --prompt "Hello" --tokens 1 --temperature 0
grep -q "^shardtrain sample: 1 token after a prompt of 5 in " "$work/one.err" &&
  ok "--tokens 1 reports 1 token" || bad "--tokens 1: $(cat "$work/one.err")"
# A count far beyond the positions allocates for the positions only.
sample huge --from "$work/tiny.safetensors" --prompt "Hello" --tokens 2147483647 --temperature 0
grep -q "stopped after 59 of 2147483647 tokens" "$work/huge.err" && ok "--tokens 2^31-1 stops at 59" \
  || bad "--tokens 2^31-1: $(cat "$work/huge.err")"

# n_head: the metadata (v300 was exported with 2 heads). Which value is read is checked in
# config_test; at initialisation attention is nearly uniform, so the text barely depends on it.
sample meta --from "$work/v300.safetensors" --prompt-ids 1,2,3 --tokens 10 --temperature 0
sample heads2 --from "$work/v300.safetensors" --prompt-ids 1,2,3 --tokens 10 --temperature 0 \
  --n-head 2
same meta heads2 && ok "n_head from the metadata" || bad "metadata and --n-head 2 differ"
# Without metadata: tiny's shape is a named config's (4 heads); v300's is not.
strip_metadata "$work/tiny.safetensors" "$work/tiny_bare.safetensors"
strip_metadata "$work/v300.safetensors" "$work/v300_bare.safetensors"
sample bare --from "$work/tiny_bare.safetensors" --prompt "Hello" --tokens 20 --temperature 0
same greedy bare && ok "n_head of the named config of the shape" || bad "bare tiny differs"
sample bare300 --from "$work/v300_bare.safetensors" --prompt-ids 1,2,3 --tokens 10 \
  --temperature 0 --n-head 2
same meta bare300 && ok "--n-head for a file without metadata" || bad "bare v300 differs"

# Ids print as ids; with a tokenizer, as its text.
if grep -Eq '^1 2 3( [0-9]+){10}$' "$work/meta.out"; then
  ok "ids: $(cat "$work/meta.out")"
else
  bad "ids output: $(cat "$work/meta.out")"
fi
write_tokenizer "$work/tok300.bin" 300
sample text --from "$work/v300.safetensors" --prompt-ids 1,2,3 --tokens 10 --temperature 0 \
  --tokenizer "$work/tok300.bin"
want=$(sed -E 's/([0-9]+)/<\1>/g; s/ //g' "$work/meta.out")
[ "$(cat "$work/text.out")" = "$want" ] && ok "tokenizer text: $want" \
  || bad "tokenizer text '$(cat "$work/text.out")', expected '$want'"

# expect PATTERN ARGS...: sample ARGS exits 2 with one error line holding PATTERN.
expect() {
  local pattern=$1
  shift
  local err rc lines
  err=$(timeout 60 "$shardtrain" sample "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ $rc -ne 2 ] || ! grep -qF -- "$pattern" <<<"$err" || [ "$lines" -ne 1 ]; then
    bad "sample $* -> exit $rc (want 2), $lines error lines:"; echo "$err"
  else
    ok "sample $* -> 2: $err"
  fi
}

printf 'not safetensors' >"$work/bad.safetensors"
# Files whose names and shapes describe a model far larger than their tensors: a 32 KB file of
# an empty "h.47.x" and one-row tables 4096 wide (a model of 9.7e9 parameters), and a wpe
# without columns. Refused before the model is built, not after allocating it.
python3 - "$work" <<'PY'
import json, struct, sys
def write(path, tensors):
    header, data = {"__metadata__": {"shardtrain.n_head": "1"}}, b""
    for name, shape in tensors:
        size = 4
        for d in shape: size *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes(size)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
write(sys.argv[1] + "/hollow.safetensors",
      [("wte.weight", [1, 4096]), ("wpe.weight", [1, 4096]), ("h.47.x", [0])])
write(sys.argv[1] + "/narrow_wpe.safetensors",
      [("wte.weight", [256, 64]), ("wpe.weight", [20000000, 0]), ("h.0.x", [0])])
PY
write_tokenizer "$work/bad_magic.bin" 300 12345
write_tokenizer "$work/tok256.bin" 256
mkdir -p "$work/ckpt/step_10"
tiny=$work/tiny.safetensors
long=$(head -c 65 /dev/zero | tr '\0' a)

expect "--from is required" --prompt hi
expect "--from $work/missing.safetensors: cannot read: No such file" \
  --from "$work/missing.safetensors" --prompt hi
expect "--from $work/ckpt/step_10 holds no checkpoint files" --from "$work/ckpt/step_10" --prompt hi
expect "--from $work/ckpt holds no checkpoint files" --from "$work/ckpt" --prompt hi
expect "--from $work/bad.safetensors" --from "$work/bad.safetensors" --prompt hi
expect "hollow.safetensors: its tensors hold 8192 values, fewer than the 9666248704 parameters" \
  --from "$work/hollow.safetensors" --prompt-ids 1
expect "narrow_wpe.safetensors: wpe.weight has 0 columns and wte.weight 64" \
  --from "$work/narrow_wpe.safetensors" --prompt-ids 1
expect "--prompt is empty" --from "$tiny" --prompt ""
expect "--prompt-ids is empty" --from "$tiny" --prompt-ids ""
expect "a prompt is required" --from "$tiny"
expect "--prompt and --prompt-ids: give one" --from "$tiny" --prompt hi --prompt-ids 1
expect "--prompt-ids: token 256 (item 2) is outside the model's vocabulary [0, 256)" \
  --from "$tiny" --prompt-ids 1,256
expect "--prompt-ids '1,x': item 2 is not a token id" --from "$tiny" --prompt-ids 1,x
expect "--prompt-ids '-1': item 1 is not a token id" --from "$tiny" --prompt-ids=-1
expect "--prompt-ids '1, ,2': item 2 is not a token id" --from "$tiny" --prompt-ids "1, ,2"
expect "--prompt-ids ' ': item 1 is not a token id" --from "$tiny" --prompt-ids " "
expect "--prompt has 65 tokens, the model has only 64 positions" --from "$tiny" --prompt "$long"
expect "--tokens must be >= 1, got 0" --from "$tiny" --prompt hi --tokens 0
expect "--temperature must be >= 0, got -1" --from "$tiny" --prompt hi --temperature -1
expect "--temperature: 'nan' is not a finite number" --from "$tiny" --prompt hi --temperature nan
expect "--top-k must be >= 0, got -1" --from "$tiny" --prompt hi --top-k -1
expect "--n-head must be >= 0, got -2" --from "$tiny" --prompt hi --n-head -2
expect "n_embd 64 is not divisible by n_head 3" --from "$work/tiny_bare.safetensors" --prompt hi \
  --n-head 3
expect "--from $tiny records n_head 4 (metadata shardtrain.n_head) and the model asks for n_head 1" \
  --from "$tiny" --prompt hi --n-head 1 --temperature 0
expect "n_layer 2, n_embd 48 is not a named config's shape" \
  --from "$work/v300_bare.safetensors" --prompt-ids 1
expect "GPT-2 BPE encoding of text is not implemented" --from "$work/v300.safetensors" --prompt hi
expect "--tokenizer $work/bad_magic.bin: magic number 12345" \
  --from "$work/v300.safetensors" --prompt-ids 1 --tokenizer "$work/bad_magic.bin"
expect "--tokenizer $work/nothing.bin: cannot open" \
  --from "$work/v300.safetensors" --prompt-ids 1 --tokenizer "$work/nothing.bin"
expect "--tokenizer $work/tok256.bin has 256 tokens, the model's vocabulary 300" \
  --from "$work/v300.safetensors" --prompt-ids 1 --tokenizer "$work/tok256.bin"
expect "unknown flag '--bogus'" --from "$tiny" --prompt hi --bogus 1

# --help documents every flag the parser accepts.
help=$("$shardtrain" sample --help)
for f in from prompt prompt-ids tokens temperature top-k seed tokenizer n-head; do
  grep -q -- "--$f " <<<"$help" || bad "sample --help lacks --$f"
done
"$shardtrain" --help | grep "sample" > /dev/null || bad "shardtrain --help lacks sample"
grep -q -- "--from .*checkpoint step directory" <<<"$help" || bad "sample --help omits checkpoints"

[ $fail -eq 0 ] && echo "cli_test: passed" || echo "cli_test: FAILED"
exit $fail
