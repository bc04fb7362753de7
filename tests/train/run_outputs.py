"""run_outputs.py - what the end-to-end training tests read back from a run of train_runs.sh:
its metrics lines and its exported F32 safetensors, and how two runs are compared."""
import array
import filecmp
import json
import os
import struct


def metrics(work, name):
    """The JSON metrics lines of run `name`, one dict per step."""
    with open(os.path.join(work, name + ".jsonl")) as f:
        return [json.loads(line) for line in f]


def tensors(path):
    """Every tensor of an F32 safetensors file, by name, as flat arrays."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = array.array("f", raw[8 + n + a:8 + n + b])
    return out


def relative_frobenius(got, want):
    """|got - want| / |want| in the Frobenius norm."""
    err = sum((x - y) ** 2 for x, y in zip(got, want)) ** 0.5
    return err / max(sum(x * x for x in want) ** 0.5, 1e-30)


def same_export(work, a, b):
    """Whether runs a and b exported byte-identical files."""
    return filecmp.cmp(os.path.join(work, a + ".safetensors"),
                       os.path.join(work, b + ".safetensors"), shallow=False)
