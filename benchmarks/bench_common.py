"""bench_common.py - what the GPU benchmark's scripts share: the GPT-2 shapes it trains, the
FLOPs its MFU counts, and the one-line error of a bad input.

The shapes are shardtrain's named configs (engine/model/gpt_config.c): GPT-2's vocabulary of
50257 padded to a multiple of 128 inside, 1024 learned positions, LM head tied to the token
embedding. The model FLOPs per token are the simulator's (engine/plan/sim_ops.c,
sim_model_flops): 6 N + 6 L C T, with N the weights used in matmuls (12 L C^2 for the blocks plus
the tied head's V_padded C; biases, norms and the position table do no matmul work) and
6 L C T the causal attention's two products, forward and backward. MFU divides FLOPs per second
by the H100/H200 datasheet's dense bf16 rate, 989 TFLOP/s.

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
    return (vocab + multiple - 1) // multiple * multiple


def shape(name):
    """n_layer, n_head, n_embd of a named config; ValueError naming the choices otherwise."""
    if name not in SHAPES:
        raise ValueError(f"model '{name}' is not one of {', '.join(SHAPES)}")
    return SHAPES[name]


def parameters(name):
    """The trained parameters, as `shardtrain train` and `plan` count them: the vocabulary's
    padding rows left out."""
    n_layer, _, c = shape(name)
    per_block = 2 * c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (4 * c * c + 4 * c) + \
        (4 * c * c + c)
    return VOCAB * c + POSITIONS * c + n_layer * per_block + 2 * c


def flops_per_token(name, seq_len):
    """6 N + 6 L C T: the training FLOPs of one token in a sequence of seq_len."""
    n_layer, _, c = shape(name)
    weights = 12 * n_layer * c * c + padded_vocab() * c
    return 6 * weights + 6 * n_layer * c * seq_len


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
