#!/usr/bin/env python3
"""Regenerates reference.safetensors with Hugging Face's own safetensors package.

The file is committed so that the tests compare shardtrain's reader and writer with the
reference implementation without needing it: safetensors_reference_test reads it and checks
every value, and writes the same tensors and metadata and expects identical bytes. Those
values are spelled out again, independently, in safetensors_reference_test.c.

Run once by hand (needs `pip install safetensors`, 0.8.0 was used):
    python3 tests/engine/testdata/make_reference.py tests/engine/testdata/reference.safetensors
"""
import ctypes
import struct
import sys

import safetensors


def tensor(dtype, shape, fmt, values):
    data = struct.pack("<" + fmt * len(values), *values)
    buf = ctypes.create_string_buffer(data, len(data))
    spec = safetensors.TensorSpec(dtype=dtype, shape=shape, data_ptr=ctypes.addressof(buf),
                                  data_len=len(data))
    return spec, buf


def main():
    specs = {
        "wte.weight": tensor("float32", [4, 3], "f", [i * 0.5 - 1.0 for i in range(12)]),
        # bf16 and fp16 as raw bit patterns: bf16 1, -2, 0.5; fp16 1, 2, 3, 4.
        "h.0.ln_1.bias": tensor("bfloat16", [3], "H", [0x3F80, 0xC000, 0x3F00]),
        "h.0.attn.bias": tensor("float16", [2, 2], "H", [0x3C00, 0x4000, 0x4200, 0x4400]),
        "step": tensor("int64", [], "q", [1234567890123]),
        "tokens": tensor("int32", [5], "i", [-1, 0, 1, 255, 2**31 - 1]),
        "mask": tensor("uint8", [3], "B", [1, 0, 255]),
        "loss": tensor("float64", [2], "d", [0.25, -3.5]),
        "empty": tensor("float32", [0, 3], "f", []),
    }
    # One key: the reference writes metadata from a hash map, so several keys have no fixed order.
    metadata = {"note": "quote \" backslash \\ tab \t newline \n ctrl \x01 utf8 \u00e9"}
    safetensors.serialize_file({name: spec for name, (spec, _) in specs.items()}, sys.argv[1],
                               metadata)


if __name__ == "__main__":
    main()
