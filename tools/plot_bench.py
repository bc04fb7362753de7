#!/usr/bin/env python3
"""plot_bench.py - draws the GPU benchmark's table: tokens/s and MFU by model size, one line per
system (the CSV that benchmarks/gpu_bench.sh and `bench_results.py table` write).

    tools/plot_bench.py BENCH.csv --out bench.png [--title TEXT]

Two panels against the parameter count (log scale): tokens/s and MFU, one line per system over
the sizes it measured. A run that did not measure (a status other than ok: does not fit, failed,
timeout) has no point; the legend counts such runs per system. Bad input (a missing file, a CSV
without the table's columns or without one measured row, an --out that cannot be written) prints
one error line and exits 2; a missing matplotlib exits 1 (plot_common.py).
"""
import sys

import plot_common

PROG = "plot_bench.py"
NEEDED = ("model", "params_m", "system", "status", "tokens_per_s", "mfu")


def fail(message):
    plot_common.fail(PROG, message)


def read_rows(path):
    rows = plot_common.read_csv(PROG, path, NEEDED, "a benchmark table")
    try:
        measured = [dict(r, params=float(r["params_m"]), tps=float(r["tokens_per_s"]),
                         mfu_pct=100 * float(r["mfu"])) for r in rows if r["status"] == "ok"]
    except ValueError as e:
        fail(f"{path}: a measured row has a value that is not a number ({e})")
    if not measured:
        fail(f"{path}: no measured row (status ok)")
    return rows, measured


def draw(rows, measured, out, title):
    plt = plot_common.pyplot(PROG)
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, (speed, mfu) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=90)
    for system in systems:
        mine = sorted((r for r in measured if r["system"] == system), key=lambda r: r["params"])
        missing = sum(1 for r in rows if r["system"] == system and r["status"] != "ok")
        label = system + (f" ({missing} not measured)" if missing else "")
        for axis, key in ((speed, "tps"), (mfu, "mfu_pct")):
            axis.plot([r["params"] for r in mine], [r[key] for r in mine], "o-", label=label)
    models = sorted({(float(r["params_m"]), r["model"]) for r in rows})
    for axis, name in ((speed, "tokens/s"), (mfu, "MFU (%)")):
        axis.set_xscale("log")
        axis.set_xticks([p for p, _ in models])
        axis.set_xticklabels([f"{m}\n{p:.0f}M" for p, m in models])
        axis.minorticks_off()
        axis.set_xlabel("model (parameters)")
        axis.set_ylabel(name)
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
    speed.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    plot_common.save(PROG, plt, fig, out)
    return systems


def main(argv):
    parser = plot_common.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="the benchmark's CSV (bench.csv)")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--title", default="", help="title above the panels")
    args = parser.parse_args(argv)
    plot_common.check_out(PROG, args.out)
    rows, measured = read_rows(args.csv)
    systems = draw(rows, measured, args.out, args.title)
    print(f"{args.out}: {len(measured)} measured runs of {len(rows)}, {len(systems)} systems")


if __name__ == "__main__":
    main(sys.argv[1:])
