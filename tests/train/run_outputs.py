"""run_outputs.py - what the end-to-end training tests read back from a run of train_runs.sh:
its metrics lines and its exported F32 safetensors, and how two runs are compared. Exports are
compared by names, then shapes, then element counts, and only then by value, so a tensor that
is missing, reshaped or cut short is reported as such rather than compared on its prefix."""
import array
import filecmp
import json
import math
import os
import struct


def metrics(work, name):
    """The JSON metrics lines of run `name`, one dict per step."""
    with open(os.path.join(work, name + ".jsonl")) as f:
        return [json.loads(line) for line in f]


def tensors(path):
    """Every tensor of an F32 safetensors file, by name, as (shape, flat array). A tensor that
    is not F32, or whose byte range does not hold its shape's elements, raises ValueError."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {e['dtype']}, not F32")
        a, b = e["data_offsets"]
        values = array.array("f", raw[8 + n + a:8 + n + b])
        if len(values) != math.prod(e["shape"]):
            raise ValueError(f"{path}: {name} holds {len(values)} elements, its shape "
                             f"{e['shape']} needs {math.prod(e['shape'])}")
        out[name] = (e["shape"], values)
    return out


def relative_frobenius(got, want):
    """|got - want| / |want| in the Frobenius norm, over two flat arrays of equal length."""
    if len(got) != len(want):
        raise ValueError(f"{len(got)} elements compared with {len(want)}")
    err = sum((x - y) ** 2 for x, y in zip(got, want)) ** 0.5
    return err / max(sum(x * x for x in want) ** 0.5, 1e-30)


def compare_exports(got, want):
    """Compares two results of tensors(): returns ({name: relative Frobenius difference} for the
    tensors both hold with equal shapes, [messages for every other mismatch])."""
    problems = [f"{name} missing" for name in sorted(set(want) - set(got))]
    problems += [f"{name} unexpected" for name in sorted(set(got) - set(want))]
    diffs = {}
    for name in sorted(set(got) & set(want)):
        (got_shape, got_values), (want_shape, want_values) = got[name], want[name]
        if got_shape != want_shape:
            problems.append(f"{name} has shape {got_shape}, expected {want_shape}")
        else:
            diffs[name] = relative_frobenius(got_values, want_values)
    return diffs, problems


def tokens_problems(rows, per_step):
    """A message (in a list, empty when all is well) naming the first metrics line whose
    "tokens" is not per_step x (step + 1), and how many such lines there are."""
    bad = [r for r in rows if r["tokens"] != per_step * (r["step"] + 1)]
    return [f"step {r['step']} tokens {r['tokens']}, expected {per_step * (r['step'] + 1)} "
            f"({len(bad)} of {len(rows)} lines wrong)" for r in bad[:1]]


def same_export(work, a, b):
    """Whether runs a and b exported byte-identical files."""
    return filecmp.cmp(os.path.join(work, a + ".safetensors"),
                       os.path.join(work, b + ".safetensors"), shallow=False)
