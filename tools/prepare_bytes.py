#!/usr/bin/env python3
"""Turns text files into byte-level token shards (vocabulary 256, token = byte value).

The shards use llm.c's format (docs/FORMATS.md), which the engine's token loader reads: a
header of 256 little-endian int32 (20240520, 1, token count) and then the tokens as uint16.
The input files are concatenated, the first --val-fraction of the bytes becomes the
validation split and the rest the training split. The unigram entropy of the validation
split, printed in nats, is the loss of a model that learned only byte frequencies: a trained
model's validation loss should end well below it.

Standard library only, so it runs wherever python3 does.
"""
import argparse
import math
import os
import struct
import sys

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
MAX_SHARD_TOKENS = 2**31 - 1  # the header's token count is an int32
DEFAULT_INPUT = "/usr/share/games/fortunes"
# Beside each text file, the fortunes package keeps a binary index (.dat) and a symlink (.u8).
SKIPPED_SUFFIXES = (".dat", ".u8")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Writes OUT_DIR/PREFIX_val_000000.bin and OUT_DIR/PREFIX_train_NNNNNN.bin (the "
        "glob pattern for training is then 'OUT_DIR/PREFIX_train_*.bin'), and prints the token "
        "counts and the validation split's unigram entropy.")
    parser.add_argument(
        "inputs", nargs="*", default=[DEFAULT_INPUT],
        help="text files, or directories whose regular files (not subdirectories, not "
        "%s files) are read in name order; default: %s (Debian's fortunes package)"
        % (" or ".join(SKIPPED_SUFFIXES), DEFAULT_INPUT))
    parser.add_argument("--out-dir", default="data/fortunes",
                        help="directory for the shards, created if missing (default: %(default)s)")
    parser.add_argument("--prefix", default="bytes",
                        help="file name prefix of the shards (default: %(default)s)")
    parser.add_argument("--val-fraction", type=float, default=0.05,
                        help="share of the bytes, taken from the start, that form the validation "
                        "split (default: %(default)s)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000,
                        help="most tokens per training shard, as in llm.c (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0.0 < args.val_fraction < 1.0:
        parser.error("--val-fraction must be between 0 and 1")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        parser.error("--shard-tokens must be in [1, %d]" % MAX_SHARD_TOKENS)
    return args


def plural(count):
    return "" if count == 1 else "s"


def input_files(inputs):
    for path in inputs:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if os.path.isfile(full) and not name.endswith(SKIPPED_SUFFIXES):
                    yield full
        elif os.path.isfile(path):
            yield path
        else:
            sys.exit("prepare_bytes: %s is neither a file nor a directory" % path)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_shard(path, tokens):
    header = struct.pack("<3i", MAGIC, VERSION, len(tokens)) + bytes(4 * (HEADER_INTS - 3))
    # A byte is its own token; uint16 little-endian puts it first and a zero byte after it.
    body = bytearray(2 * len(tokens))
    body[0::2] = tokens
    # Written beside its name, then renamed: a run cut short leaves no truncated shard under it.
    part = path + ".part"
    with open(part, "wb") as f:
        f.write(header)
        f.write(body)
    os.replace(part, path)


def unigram_entropy_nats(tokens):
    counts = [0] * 256
    for byte in tokens:
        counts[byte] += 1
    total = len(tokens)
    return -sum(c / total * math.log(c / total) for c in counts if c)


def main(argv):
    args = parse_args(argv)
    files = list(input_files(args.inputs))
    data = b"".join(read_bytes(path) for path in files)
    val_tokens = int(len(data) * args.val_fraction)
    if val_tokens == 0 or val_tokens == len(data):
        sys.exit("prepare_bytes: %d bytes from %d file%s cannot be split with --val-fraction %g"
                 % (len(data), len(files), plural(len(files)), args.val_fraction))
    val, train = data[:val_tokens], data[val_tokens:]

    os.makedirs(args.out_dir, exist_ok=True)
    write_shard(os.path.join(args.out_dir, "%s_val_000000.bin" % args.prefix), val)
    shard_count = 0
    for start in range(0, len(train), args.shard_tokens):
        name = "%s_train_%06d.bin" % (args.prefix, shard_count)
        write_shard(os.path.join(args.out_dir, name), train[start:start + args.shard_tokens])
        shard_count += 1

    print("read %d file%s, %d bytes" % (len(files), plural(len(files)), len(data)))
    print("train: %d tokens in %d shard%s" % (len(train), shard_count, plural(shard_count)))
    print("val: %d tokens in 1 shard" % len(val))
    print("val unigram entropy: %.6f nats" % unigram_entropy_nats(val))


if __name__ == "__main__":
    main(sys.argv[1:])
