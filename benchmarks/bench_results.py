#!/usr/bin/env python3
"""bench_results.py - the GPU benchmark's runs, from measurements to one table and its CSV.

A run is one system training one model size; benchmarks/gpu_bench.sh collects one record per run
as a JSON line (`result {...}` in a run's log, gathered into runs.jsonl):
    {"system", "model", "seq_len", "status", "micro_batch", "grad_accum", "tokens_per_s",
     "peak_mem_bytes", "version", "note"}
status is "ok" or what went wrong ("does not fit", "failed", "timeout"), or "skipped" (not
started: the call's time budget was spent); a run that is not ok has no tokens_per_s or peak
memory. Subcommands:

  shardtrain METRICS.jsonl --system S --model M --seq-len T --micro-batch B --grad-accum A
             --warmup W [--version V]
      the record of a `shardtrain train --metrics` run: tokens/s over the steps after the first
      W (the steps' tokens over their summed step times, as the trainer's own summary; the
      tokens exactly, from the records' running count `tokens`), and the peak memory as the
      trainer reports it (category peaks summed; docs/CLI.md).
  record --system S --model M --seq-len T --status TEXT [--note TEXT] [--micro-batch B] ...
      the record of a run that produced no measurement.
  table RUNS.jsonl [MORE.jsonl ...] --csv OUT.csv
      one row per (model, system), a later record replacing an earlier one (so several partial
      benchmark runs merge), except that a "skipped" record replaces none; MFU from tokens/s
      (bench_common.py); prints the table, writes CSV.

Bad input: one error line, exit 2.
"""
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

PROG = "bench_results.py"
SYSTEMS = ["shardtrain-zero0", "shardtrain-zero3", "shardtrain-zero0-flash",
           "shardtrain-zero3-flash", "pytorch-compile", "pytorch-fsdp2"]
COLUMNS = ["model", "params_m", "system", "status", "micro_batch", "grad_accum", "seq_len",
           "tokens_per_s", "mfu", "peak_mem_gib", "version", "note"]


def record(system, model, seq_len, status, micro_batch=None, grad_accum=None, tokens_per_s=None,
           peak_mem_bytes=None, version="", note=""):
    """A run record (the module docstring's fields); a failed run keeps no measurement."""
    ok = status == "ok"
    return {"system": system, "model": model, "seq_len": seq_len, "status": status,
            "micro_batch": micro_batch, "grad_accum": grad_accum,
            "tokens_per_s": tokens_per_s if ok else None,
            "peak_mem_bytes": peak_mem_bytes if ok else None, "version": version, "note": note}


def result_line(rec):
    """How a run prints its record, for gpu_bench.sh to collect."""
    return "result " + json.dumps(rec)


def shardtrain_record(path, warmup, **fields):
    """The record of a shardtrain metrics file (see the module docstring)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
    except OSError as e:
        return record(status="failed", note=f"no metrics: {e.strerror}", **fields)
    try:
        steps = [json.loads(line) for line in lines]
        timed = [i for i, s in enumerate(steps) if s["step"] >= warmup]
        seconds = sum(steps[i]["step_ms"] for i in timed) / 1e3
        counts = [s["tokens"] for s in steps]
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
            raise TypeError(f"tokens: not whole numbers: {counts}")
        peak = max(sum(s["mem"].values()) for s in steps) if steps else 0
    except (ValueError, KeyError, TypeError) as e:
        bench_common.fail(PROG, f"{path}: not a shardtrain metrics file ({type(e).__name__}: {e})")
    if not timed:
        return record(status="failed", note=f"{len(steps)} steps recorded, none after the "
                      f"{warmup} warm-up steps", **fields)
    # `tokens` counts every token trained so far (engine/train/metrics.h), so a step's own are
    # its count less the step's before it (the record just before it, of the step before; none
    # before step 0). Records without that (a file that starts later, or has steps again after a
    # resume) cannot tell.
    tokens = 0
    for i in timed:
        step = steps[i]["step"]
        if step == 0:
            tokens += counts[i]
        elif i > 0 and steps[i - 1]["step"] == step - 1:
            tokens += counts[i] - counts[i - 1]
        else:
            return record(status="failed", note=f"step {step} follows no record of step "
                          f"{step - 1}: the tokens before it are unknown", **fields)
    if tokens <= 0 or seconds <= 0:
        return record(status="failed", note=f"{tokens} tokens in {seconds:g} s over the timed "
                      "steps", **fields)
    return record(status="ok", tokens_per_s=tokens / seconds, peak_mem_bytes=peak,
                  note=f"{len(timed)} timed steps after {warmup} warm-up", **fields)


def read_records(paths):
    """Every run record of the files, in order; a line that is not one is an error."""
    records = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            bench_common.fail(PROG, f"{path}: {e.strerror}")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                bench_common.shape(rec["model"])
                valid = isinstance(rec, dict) and rec["system"] and rec["status"] and \
                    int(rec["seq_len"]) > 0
            except (ValueError, KeyError, TypeError):
                valid = False
            if not valid:
                bench_common.fail(PROG, f"{path}:{number}: not a run record: {line[:80]}")
            records.append(rec)
    if not records:
        bench_common.fail(PROG, f"no run records in {', '.join(paths)}")
    return records


def table_rows(records):
    """CSV rows (COLUMNS), the last record of each (model, system), ordered by model size, then
    by SYSTEMS' order (other systems after, by name)."""
    latest = {}
    for rec in records:
        key = (rec["model"], rec["system"])
        if rec["status"] != "skipped" or key not in latest:
            latest[key] = rec
    models = list(bench_common.SHAPES)

    def order(key):
        model, system = key
        rank = SYSTEMS.index(system) if system in SYSTEMS else len(SYSTEMS)
        return (models.index(model), rank, system)

    rows = []
    for key in sorted(latest, key=order):
        rec = latest[key]
        tps, peak = rec.get("tokens_per_s"), rec.get("peak_mem_bytes")
        ok = rec["status"] == "ok" and tps is not None
        rows.append({
            "model": rec["model"],
            "params_m": f"{bench_common.parameters(rec['model']) / 1e6:.1f}",
            "system": rec["system"],
            "status": rec["status"],
            "micro_batch": rec.get("micro_batch") or "",
            "grad_accum": rec.get("grad_accum") or "",
            "seq_len": rec["seq_len"],
            "tokens_per_s": f"{tps:.0f}" if ok else "",
            "mfu": f"{bench_common.mfu(tps, rec['model'], int(rec['seq_len'])):.4f}" if ok else "",
            "peak_mem_gib": f"{peak / 2**30:.2f}" if ok and peak is not None else "",
            "version": rec.get("version") or "",
            "note": rec.get("note") or "",
        })
    return rows


def format_table(rows):
    """The rows for people: MFU in percent, empty cells as '-', the note last."""
    heads = ["model", "params M", "system", "status", "mb", "accum", "tokens/s", "MFU %",
             "peak GiB", "version", "note"]
    keys = ["model", "params_m", "system", "status", "micro_batch", "grad_accum",
            "tokens_per_s", "mfu", "peak_mem_gib", "version", "note"]
    cells = []
    for row in rows:
        line = [str(row[k]) if row[k] != "" else "-" for k in keys]
        if row["mfu"]:
            line[keys.index("mfu")] = f"{100 * float(row['mfu']):.1f}"
        cells.append(line)
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    text = []
    for line in [heads] + cells:
        text.append("  ".join(c.ljust(w) for c, w in zip(line[:-1], widths)) + "  " + line[-1])
    return "\n".join(text)


def write_csv(rows, path):
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    except OSError as e:
        bench_common.fail(PROG, f"--csv {path}: {e.strerror}")


def add_run_flags(parser):
    parser.add_argument("--system", required=True)
    parser.add_argument("--model", required=True, choices=list(bench_common.SHAPES))
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--micro-batch", type=int)
    parser.add_argument("--grad-accum", type=int)
    parser.add_argument("--version", default="")


def main(argv):
    parser = bench_common.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=bench_common.Parser)
    st = sub.add_parser("shardtrain", help="the record of a shardtrain metrics file")
    st.add_argument("metrics")
    st.add_argument("--warmup", type=int, required=True)
    add_run_flags(st)
    rec = sub.add_parser("record", help="the record of a run without a measurement")
    rec.add_argument("--status", required=True)
    rec.add_argument("--note", default="")
    add_run_flags(rec)
    tab = sub.add_parser("table", help="the table and CSV of run records")
    tab.add_argument("runs", nargs="+")
    tab.add_argument("--csv", required=True)
    args = parser.parse_args(argv)

    if args.command == "table":
        rows = table_rows(read_records(args.runs))
        write_csv(rows, args.csv)
        print(format_table(rows))
        return
    fields = dict(system=args.system, model=args.model, seq_len=args.seq_len,
                  micro_batch=args.micro_batch, grad_accum=args.grad_accum, version=args.version)
    if args.command == "shardtrain":
        print(result_line(shardtrain_record(args.metrics, args.warmup, **fields)))
    else:
        print(result_line(record(status=args.status, note=args.note, **fields)))


if __name__ == "__main__":
    main(sys.argv[1:])
