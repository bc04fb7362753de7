#!/usr/bin/env python3
"""random_tokens.py - one llm.c token shard of uniformly random tokens below --vocab, the data the
GPU benchmark trains shardtrain on (the PyTorch peer draws the same distribution on the GPU).
The format is tools/prepare_bytes.py's (docs/FORMATS.md); only the tokens differ.

    random_tokens.py OUT.bin [--tokens N] [--vocab V] [--seed S]
"""
import os
import random
import struct
import sys
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
import bench_common  # noqa: E402
import prepare_bytes  # noqa: E402

PROG = "random_tokens.py"


def main(argv):
    parser = bench_common.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the shard to write")
    parser.add_argument("--tokens", type=int, default=4 << 20)
    parser.add_argument("--vocab", type=int, default=bench_common.VOCAB)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args(argv)
    if not 1 <= args.tokens <= prepare_bytes.MAX_SHARD_TOKENS:
        parser.error(f"--tokens {args.tokens}: must be in [1, {prepare_bytes.MAX_SHARD_TOKENS}]")
    if not 1 <= args.vocab <= 65536:
        parser.error(f"--vocab {args.vocab}: must be in [1, 65536] (tokens are uint16)")
    rng = random.Random(args.seed)
    tokens = array("H", (rng.randrange(args.vocab) for _ in range(args.tokens)))
    if sys.byteorder != "little":
        tokens.byteswap()
    header = struct.pack("<3i", prepare_bytes.MAGIC, prepare_bytes.VERSION, args.tokens)
    try:
        with open(args.out, "wb") as f:
            f.write(header + bytes(4 * (prepare_bytes.HEADER_INTS - 3)))
            tokens.tofile(f)
    except OSError as e:
        bench_common.fail(PROG, f"{args.out}: {e.strerror}")
    print(f"{PROG}: {args.tokens} tokens below {args.vocab} in {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
