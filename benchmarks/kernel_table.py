#!/usr/bin/env python3
"""kernel_table.py - where one training step's GPU time goes, per kernel, against the ceilings.

    kernel_table.py PROFILE.csv --ceilings CEILINGS.txt [--calibration GEMM.csv] [--csv OUT.csv]

PROFILE.csv is Nsight Compute's raw page (`ncu --csv --page raw --print-units base --metrics
METRICS`, benchmarks/gpu_bench.sh gives the list) of a run of a few training steps: one row per
kernel launch in launch order. The last step is cut out at the optimizer: the launches whose
name matches --optimizer (default adamw) come in one cluster per step, and the last step is
everything after the second-to-last cluster (with one cluster only, the whole profile is the step,
start-up included, and the heading says so). Launches are then grouped by kernel name (the
function's name, without template arguments or parameters): their count, their summed time,
its share of the step's kernel time, and the rates they reached:
  - TFLOP/s: tensor-core bf16 operations (sm__ops_path_tensor_src_bf16_dst_fp32, scaled to FLOPs
    by --calibration, the same counters over one GEMM of known FLOPs that `ceilings --gemm-once`
    ran) plus CUDA-core fp32 FLOPs (2 x FFMA + FADD + FMUL thread instructions), against the
    measured bf16 GEMM ceiling;
  - GB/s: DRAM bytes read plus written, against the measured device-copy ceiling (which counts
    bytes the same way);
  - limit: "compute" or "memory" by the larger fraction of its ceiling, "latency" when both are
    under 30% (small grids, serial loops, launch-bound work).
ncu replays each kernel alone with cleared caches, so the times are each kernel's own, not the
overlapped timeline of an unprofiled step; the shares are of their sum.

CEILINGS.txt is what `ceilings` printed (lines `gemm_bf16 ... tflops=X`, `copy_d2d ... gbps=Y`).
Bad input: one error line, exit 2.
"""
import csv
import io
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

PROG = "kernel_table.py"
TIME = "gpu__time_duration.sum"
DRAM = ("dram__bytes_read.sum", "dram__bytes_write.sum")
TENSOR = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
FP32 = {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 2,
        "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1,
        "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 1}
# Times and bytes in any unit ncu prints; counts (operations, instructions) must come in base
# units (--print-units base), whatever their unit's name.
UNIT_SCALE = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1,
              "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}
LATENCY_BELOW = 0.3


def kernel_base(name):
    """'void adamw_kernel<__nv_bfloat16>(float *, ...)' -> 'adamw_kernel'."""
    name = re.sub(r"^void\s+", "", name.strip())
    base = re.split(r"[<(]", name, maxsplit=1)[0].strip()
    return base.split("::")[-1] or name


def number(text, unit, where, count):
    """A profiler value in base units (seconds, bytes, counts); None for 'n/a'."""
    text = text.strip().replace(",", "")
    if text in ("", "n/a"):
        return None
    if not count and unit not in UNIT_SCALE:
        fail(f"{where}: unit '{unit}' is not one of {', '.join(UNIT_SCALE)}")
    try:
        return float(text) * (1 if count else UNIT_SCALE[unit])
    except ValueError:
        fail(f"{where}: '{text}' is not a number")


def fail(message):
    bench_common.fail(PROG, message)


def read_profile(path):
    """The launches of an ncu raw CSV, in launch order: dicts with name, seconds, bytes,
    tensor_ops and fp32_flops (None where a metric is missing)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        fail(f"{path}: no ncu raw CSV header (a line starting with \"ID\")")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    head, units = rows[0], {}
    if len(rows) > 1 and rows[1] and rows[1][0] == "":
        units = dict(zip(head, rows[1]))
        rows = rows[2:]
    else:
        rows = rows[1:]
    for need in ("ID", "Kernel Name", TIME):
        if need not in head:
            fail(f"{path}: no '{need}' column (profile with --metrics {TIME},...)")
    launches = []
    for n, row in enumerate(rows, start + 3):
        if len(row) != len(head):
            continue  # a profiler message between the rows
        cell = dict(zip(head, row))

        def metric(name, cell=cell, n=n):
            if name not in cell:
                return None
            return number(cell[name], units.get(name, ""), f"{path}:{n}: {name}",
                          count=name == TENSOR or name in FP32)

        seconds = metric(TIME)
        if seconds is None:
            continue
        dram = [metric(m) for m in DRAM]
        fp32 = [metric(m) for m in FP32]
        launches.append({
            "id": int(cell["ID"]),
            "name": kernel_base(cell["Kernel Name"]),
            "seconds": seconds,
            "bytes": None if None in dram else sum(dram),
            "tensor_ops": metric(TENSOR),
            "fp32_flops": None if None in fp32 else sum(k * v for k, v in zip(FP32.values(),
                                                                               fp32)),
        })
    if not launches:
        fail(f"{path}: no kernel launches")
    return sorted(launches, key=lambda x: x["id"])


def last_step(launches, optimizer, gap):
    """The launches of the last step and whether it could be told apart (see the docstring):
    optimizer launches at most `gap` launches apart belong to one step's optimizer."""
    hits = [i for i, x in enumerate(launches) if re.search(optimizer, x["name"])]
    ends = [a for a, b in zip(hits, hits[1:]) if b - a > gap]
    if not ends:
        return launches, False
    return launches[ends[-1] + 1:], True


def read_ceilings(path):
    """(GEMM FLOP/s, copy bytes/s) from the lines `ceilings` printed."""
    values = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                words = shlex.split(line)
                if words and words[0] in ("gemm_bf16", "copy_d2d"):
                    values[words[0]] = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    except (OSError, ValueError) as e:
        fail(f"{path}: {getattr(e, 'strerror', None) or e}")
    try:
        return float(values["gemm_bf16"]["tflops"]) * 1e12, float(values["copy_d2d"]["gbps"]) * 1e9
    except (KeyError, ValueError):
        fail(f"{path}: no 'gemm_bf16 ... tflops=X' and 'copy_d2d ... gbps=Y' lines (the output "
             "of benchmarks/ceilings)")


def tensor_flops_per_op(calibration, flops):
    """FLOPs per counted tensor op, from a profile of one GEMM of `flops` FLOPs; None (with a
    warning) when the counter saw none there, as on a GPU whose tensor path it does not count."""
    ops = sum(x["tensor_ops"] or 0 for x in read_profile(calibration))
    if ops <= 0:
        print(f"{PROG}: warning: {calibration}: the GEMM counted no tensor operations",
              file=sys.stderr)
        return None
    return flops / ops


def aggregate(step, flops_per_op, gemm_peak, copy_peak):
    """Rows per kernel name, largest time first (see the docstring for the columns)."""
    total = sum(x["seconds"] for x in step)
    groups = {}
    for x in step:
        groups.setdefault(x["name"], []).append(x)
    rows = []
    for name, calls in groups.items():
        seconds = sum(x["seconds"] for x in calls)
        flops = None
        if flops_per_op is not None and all(x["tensor_ops"] is not None for x in calls) and \
                all(x["fp32_flops"] is not None for x in calls):
            flops = sum(x["tensor_ops"] * flops_per_op + x["fp32_flops"] for x in calls)
        moved = None if any(x["bytes"] is None for x in calls) else sum(x["bytes"] for x in calls)
        rate = flops / seconds if flops is not None else None
        bandwidth = moved / seconds if moved is not None else None
        of_gemm = rate / gemm_peak if rate is not None else None
        of_copy = bandwidth / copy_peak if bandwidth is not None else None
        limit = ""
        if of_gemm is not None and of_copy is not None:
            limit = "latency" if max(of_gemm, of_copy) < LATENCY_BELOW else \
                "compute" if of_gemm >= of_copy else "memory"
        rows.append({"kernel": name, "calls": len(calls), "time_ms": seconds * 1e3,
                     "share": seconds / total, "tflops": rate and rate / 1e12,
                     "of_gemm": of_gemm, "gbps": bandwidth and bandwidth / 1e9,
                     "of_copy": of_copy, "limit": limit})
    return sorted(rows, key=lambda r: -r["time_ms"]), total


def cell(value, fmt):
    return "-" if value is None else format(value, fmt)


def main(argv):
    parser = bench_common.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", help="ncu --csv --page raw output of a few training steps")
    parser.add_argument("--ceilings", required=True, help="the output of benchmarks/ceilings")
    parser.add_argument("--calibration", help="ncu CSV of `ceilings --gemm-once`")
    parser.add_argument("--calibration-flops", type=float,
                        help="the FLOPs that GEMM did (its `gemm_once ... flops=` line)")
    parser.add_argument("--optimizer", default="adamw", help="regex of the optimizer's kernels")
    parser.add_argument("--cluster-gap", type=int, default=16,
                        help="most launches between two optimizer launches of one step (a "
                        "forward and backward launch many more)")
    parser.add_argument("--csv", help="write the rows here too")
    args = parser.parse_args(argv)
    if (args.calibration is None) != (args.calibration_flops is None):
        fail("--calibration and --calibration-flops go together")
    gemm_peak, copy_peak = read_ceilings(args.ceilings)
    flops_per_op = None
    if args.calibration:
        flops_per_op = tensor_flops_per_op(args.calibration, args.calibration_flops)
    step, found = last_step(read_profile(args.profile), args.optimizer, args.cluster_gap)
    rows, total = aggregate(step, flops_per_op, gemm_peak, copy_peak)
    print(f"{'the last step' if found else 'the whole profile (no step boundary found)'}: "
          f"{len(step)} launches, {total * 1e3:.3f} ms of kernel time; ceilings "
          f"{gemm_peak / 1e12:.0f} TFLOP/s bf16 GEMM, {copy_peak / 1e9:.0f} GB/s copy"
          + ("" if flops_per_op else "; no FLOP/s (no tensor-operation calibration)"))
    heads = ["kernel", "calls", "ms", "share %", "TFLOP/s", "% GEMM", "GB/s", "% copy", "limit"]
    lines = [heads]
    for r in rows:
        lines.append([r["kernel"][:60], str(r["calls"]), f"{r['time_ms']:.3f}",
                      f"{100 * r['share']:.1f}", cell(r["tflops"], ".1f"),
                      cell(r["of_gemm"] and 100 * r["of_gemm"], ".1f"), cell(r["gbps"], ".0f"),
                      cell(r["of_copy"] and 100 * r["of_copy"], ".1f"), r["limit"] or "-"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(heads))]
    for line in lines:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths))))
    if args.csv:
        try:
            with open(args.csv, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
                writer.writeheader()
                writer.writerows({k: format(v, ".6g") if isinstance(v, float) else
                                  "" if v is None else v for k, v in r.items()} for r in rows)
        except OSError as e:
            fail(f"--csv {args.csv}: {e.strerror}")


if __name__ == "__main__":
    main(sys.argv[1:])
