"""Load an exported shardtrain checkpoint into transformers' GPT2LMHeadModel and check its loss.

The file must hold the Hugging Face GPT-2 tensor names without the "transformer." prefix
(`wte.weight`, `h.0.attn.c_attn.weight` [in, out], ...), as the engine exports them. The model is
built from the flags, the tensors are loaded strictly (only the attention mask buffers that some
transformers versions keep may be absent), lm_head.weight is tied to wte, and the mean
cross-entropy over the tokens (a [B, T+1] int tensor named `tokens`; targets are the tokens
shifted by one) is printed. With --expected-loss, exits 1 when the loss differs by more than
--rtol relative.

    python3 tests/golden/check_hf_export.py EXPORT.safetensors \
        --tokens tests/golden/tiny_golden.safetensors --expected-loss 5.5406289

Needs torch, transformers and safetensors.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

# Buffers (not parameters) that GPT2Attention registers in some transformers versions.
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")


def build_model(args):
    config = GPT2Config(n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head,
                        n_positions=args.n_positions, vocab_size=args.vocab,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(config).eval()


def load_export(model, path):
    tensors = load_file(path)
    state = {"transformer." + name: t for name, t in tensors.items()}
    state["lm_head.weight"] = tensors["wte.weight"]
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith(MASK_BUFFERS)]
    if missing or result.unexpected_keys:
        sys.exit(f"{path}: missing {missing}, unexpected {result.unexpected_keys}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("export", help="safetensors file with HF GPT-2 names (no 'transformer.')")
    p.add_argument("--tokens", required=True,
                   help="safetensors file holding `tokens` [B, T+1] (the golden file does)")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--n-positions", type=int, default=64)
    p.add_argument("--expected-loss", type=float)
    p.add_argument("--rtol", type=float, default=1e-4)
    args = p.parse_args()

    model = build_model(args)
    load_export(model, args.export)
    tokens = load_file(args.tokens)["tokens"].long()
    with torch.no_grad():
        logits = model(tokens[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss = loss.item()
    print(f"loss {loss:.7f}")
    if args.expected_loss is not None:
        rel = abs(loss - args.expected_loss) / abs(args.expected_loss)
        print(f"expected {args.expected_loss:.7f}, relative difference {rel:.2e}")
        if rel > args.rtol:
            sys.exit(f"FAIL: relative difference {rel:.2e} > {args.rtol:g}")


if __name__ == "__main__":
    main()
