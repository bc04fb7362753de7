"""bench_common.py - what the GPU benchmark's scripts share: the GPT-2 shapes it trains, the
FLOPs its MFU counts, and the one-line error of a bad input.

The shapes are shardtrain's named configs (engine/model/gpt_config.c): GPT-2's vocabulary of
50257 padded to a multiple of 128 inside, 1024 learned positions, LM head tied to the token
embedding. The model FLOPs per token are the trainer's own MFU's (docs/CLI.md, "MFU"):
6 N + 6 L C T, with N every trained parameter (embeddings, biases and norms included, the
vocabulary's padding rows not: 124,439,808 for d12) and 6 L C T the causal attention's two
products, forward and backward (gpt_config_flops_per_token); so a shardtrain row's MFU is the
one its metrics report and the one `shardtrain simulate` predicts. MFU divides FLOPs per second by the H100/H200
datasheet's dense bf16 rate, 989 TFLOP/s.

Imported by bench_results.py, kernel_table.py and peers/gpt2_torch.py; standard library only.
"""
import argparse
import sys

VOCAB = 50257
POSITIONS = 1024
PEAK_BF16_FLOPS = 989e12

# name: (n_layer, n_head, n_embd), gpt_config.c's d-configs (GPT-2 small, medium, large, XL)
SHAPES = {
    "d12": (12, 12, 768),
    "d24": (24, 16, 1024),
    "d36": (36, 20, 1280),
    "d48": (48, 25, 1600),
}


def padded_vocab(vocab=VOCAB, multiple=128):
    """The vocabulary as the model holds it (the PyTorch peer's embedding and head rows)."""
    return (vocab + multiple - 1) // multiple * multiple


def shape(name):
    """n_layer, n_head, n_embd of a named config; ValueError naming the choices otherwise."""
    if name not in SHAPES:
        raise ValueError(f"model '{name}' is not one of {', '.join(SHAPES)}")
    return SHAPES[name]


def parameters(name, positions=POSITIONS):
    """The trained parameters, as `shardtrain train` counts them: the vocabulary's padding rows
    left out, and `positions` rows of the position table (the training sequence's length)."""
    n_layer, _, c = shape(name)
    per_block = 2 * c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (4 * c * c + 4 * c) + \
        (4 * c * c + c)
    return VOCAB * c + positions * c + n_layer * per_block + 2 * c


def flops_per_token(name, seq_len):
    """6 N + 6 L C T: the training FLOPs of one token in a sequence of seq_len."""
    n_layer, _, c = shape(name)
    return 6 * parameters(name, seq_len) + 6 * n_layer * c * seq_len


def mfu(tokens_per_s, name, seq_len, peak=PEAK_BF16_FLOPS):
    return tokens_per_s * flops_per_token(name, seq_len) / peak


def fail(prog, message, code=2):
    """One error line naming the program, then exit (2: a bad input)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    """argparse with one error line and exit 2, instead of usage followed by the message."""

    def error(self, message):
        fail(self.prog, message)
