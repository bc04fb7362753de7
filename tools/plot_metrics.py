#!/usr/bin/env python3
"""plot_metrics.py - draws training runs from the files `shardtrain train --metrics` writes.

    tools/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] --out loss.png [--labels a,b]

One figure, two panels against the tokens trained: the train loss of every step (a line) and
the val loss of the evaluation steps (markers), one colour per run; and the throughput
(tokens/s, the first step being a warm-up). Draws without a display (matplotlib's Agg backend).

A metrics file is opened for appending, so it may hold more than one run: a record whose step
is not after the previous one (a run started again from step 0, or resumed from an earlier
step) replaces every record from its step on, and the file is drawn as its latest history.
Lines that are not metrics records (a line cut short by a crash) are skipped with a warning.

Bad input (a missing file, a file without one metrics record, --labels that do not match the
files, an --out that cannot be written) prints one error line and exits 2; a missing matplotlib
exits 1. Needs Debian's python3-matplotlib (tools/setup.sh installs it).
"""
import json
import math
import os
import sys

import plot_common

PROG = "plot_metrics.py"


def fail(message, code=2):
    plot_common.fail(PROG, message, code)


def number(value):
    """A JSON number as a float (null, written for inf or nan, as nan); None if not a number."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_run(path):
    """The records of a metrics file, latest history only: dicts with step, tokens, loss,
    tokens_per_s and, on evaluation steps, val_loss."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    records, skipped = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        rec = None
        if isinstance(obj, dict) and isinstance(obj.get("step"), int):
            rec = {k: number(obj.get(k)) for k in ("tokens", "loss", "tokens_per_s")}
            if "val_loss" in obj:
                rec["val_loss"] = number(obj["val_loss"])
            if any(v is None for v in rec.values()):
                rec = None
            else:
                rec["step"] = obj["step"]
        if rec is None:
            skipped += 1
            continue
        while records and records[-1]["step"] >= rec["step"]:
            records.pop()
        records.append(rec)
    if not records:
        fail(f"{path}: no metrics records (JSON lines with step, tokens, loss and tokens_per_s, "
             "as `shardtrain train --metrics` writes)")
    if skipped:
        print(f"{PROG}: warning: {path}: skipped {skipped} line(s) that are not metrics records",
              file=sys.stderr)
    return records


def draw(runs, labels, out):
    plt = plot_common.pyplot(PROG)
    from matplotlib.ticker import EngFormatter
    fig, (loss_ax, speed_ax) = plt.subplots(2, 1, figsize=(9, 8), sharex=True,
                                            gridspec_kw={"height_ratios": [2, 1]})
    for i, (records, label) in enumerate(zip(runs, labels)):
        colour = f"C{i % 10}"
        tokens = [r["tokens"] for r in records]
        loss_ax.plot(tokens, [r["loss"] for r in records], color=colour, linewidth=1,
                     alpha=0.8, label=f"{label} train")
        evals = [r for r in records if "val_loss" in r]
        if evals:
            loss_ax.plot([r["tokens"] for r in evals], [r["val_loss"] for r in evals],
                         color=colour, marker="o", linestyle="--", label=f"{label} val")
        speed_ax.plot(tokens, [r["tokens_per_s"] for r in records], color=colour, linewidth=1,
                      label=label)
    loss_ax.set_ylabel("loss")
    loss_ax.set_title("training runs" if len(runs) > 1 else labels[0])
    loss_ax.legend()
    speed_ax.set_ylabel("tokens/s")
    speed_ax.set_xlabel("tokens")
    speed_ax.xaxis.set_major_formatter(EngFormatter())
    speed_ax.yaxis.set_major_formatter(EngFormatter())
    for ax in (loss_ax, speed_ax):
        ax.grid(True, alpha=0.3)
    plot_common.save(PROG, plt, fig, out)


def main():
    parser = plot_common.Parser(prog=PROG, description="Plots loss and throughput against "
                                "tokens for one or more `shardtrain train --metrics` files.")
    parser.add_argument("metrics", nargs="+", help="metrics files (JSON lines)")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--labels", help="comma-separated run names (default: file names)")
    args = parser.parse_args()

    if args.labels is not None:
        labels = args.labels.split(",")
        if len(labels) != len(args.metrics):
            fail(f"--labels names {len(labels)} run(s) for {len(args.metrics)} metrics file(s)")
    else:
        labels = [os.path.splitext(os.path.basename(p))[0] for p in args.metrics]
    plot_common.check_out(PROG, args.out)
    runs = [read_run(p) for p in args.metrics]
    draw(runs, labels, args.out)
    print(f"{args.out}: {len(runs)} run(s), {sum(len(r) for r in runs)} steps")


if __name__ == "__main__":
    main()
