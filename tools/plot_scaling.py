#!/usr/bin/env python3
"""Draws a scaling plot from the CSV of `shardtrain simulate --sweep ... --csv FILE`.

Two panels against the number of GPUs (log scale): predicted tokens/s per GPU and MFU, one
line per configuration (the CSV's `label` column: zero1, hsdp3, ...). Points whose planned
memory per rank exceeds --gpu-gib (when given) are drawn hollow: they would not fit.

Usage: plot_scaling.py SWEEP.csv OUT.png [--title TEXT] [--gpu-gib GIB]
Bad input (a missing or unreadable CSV, one without the sweep's columns or with a value that is
not a number, an output that is a directory or lies in a missing one) prints one error line and
exits 2; a missing matplotlib exits 1 (plot_common.py).
Needs matplotlib (Debian: python3-matplotlib, installed by tools/setup.sh).
"""
import sys

import plot_common

PROG = "plot_scaling.py"
NEEDED = ("label", "gpus", "tokens_per_s_per_gpu", "mfu", "mem_gib")


def fail(message):
    plot_common.fail(PROG, message)


def parse_args(argv):
    parser = plot_common.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="CSV written by shardtrain simulate --sweep --csv")
    parser.add_argument("png", help="the plot to write")
    parser.add_argument("--title", default="", help="title above the panels")
    parser.add_argument("--gpu-gib", type=float, default=0.0,
                        help="memory per GPU: configurations above it are drawn hollow")
    return parser.parse_args(argv)


def read_rows(path):
    """The sweep's rows: label, and gpus, tokens_per_s_per_gpu, mfu and mem_gib as numbers."""
    rows = plot_common.read_csv(PROG, path, NEEDED, "a simulate --sweep CSV")
    if not rows:
        fail(f"{path}: a simulate --sweep CSV without a row")
    try:
        return [dict(r, gpus=int(r["gpus"]), tokens_per_s_per_gpu=float(r["tokens_per_s_per_gpu"]),
                     mfu=float(r["mfu"]), mem_gib=float(r["mem_gib"])) for r in rows]
    except (TypeError, ValueError) as e:
        fail(f"{path}: a row has a value that is not a number ({e})")


def main(argv):
    args = parse_args(argv)
    plot_common.check_out(PROG, args.png, "output")
    rows = read_rows(args.csv)
    plt = plot_common.pyplot(PROG)
    labels = []
    for r in rows:
        if r["label"] not in labels:
            labels.append(r["label"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    for label in labels:
        mine = sorted((r for r in rows if r["label"] == label), key=lambda r: r["gpus"])
        gpus = [r["gpus"] for r in mine]
        tps = [r["tokens_per_s_per_gpu"] / 1e3 for r in mine]
        mfu = [100 * r["mfu"] for r in mine]
        fits = [args.gpu_gib <= 0 or r["mem_gib"] <= args.gpu_gib for r in mine]
        for axis, values in ((left, tps), (right, mfu)):
            line, = axis.plot(gpus, values, "-", label=label)
            color = line.get_color()
            for x, y, ok in zip(gpus, values, fits):
                axis.plot([x], [y], "o", color=color, markerfacecolor=color if ok else "none")
    for axis, name in ((left, "tokens/s per GPU (thousands)"), (right, "MFU (%)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("GPUs")
        axis.set_ylabel(name)
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title, fontsize=10)
    plot_common.save(PROG, plt, fig, args.png, "output")
    print(f"plot_scaling: wrote {args.png} ({len(rows)} points, {len(labels)} configurations)")


if __name__ == "__main__":
    main(sys.argv[1:])
