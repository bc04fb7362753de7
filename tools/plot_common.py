"""plot_common.py - what the plotting tools (plot_metrics.py, plot_scaling.py, plot_bench.py)
share: matplotlib's pyplot drawing to files without a display (the Agg backend), the checks of
--out before anything is read, reading a CSV table, saving a figure, and the one-line error of a
bad input (exit 2).

A python3 of its own (pyenv, a virtualenv) does not see Debian's python3-matplotlib: then the
calling script is run again, with the same arguments, by the system's python3, which does. Where
no python3 has matplotlib: one error line naming the interpreter, exit 1.
"""
import argparse
import csv
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"  # where Debian's python3-matplotlib is importable


def fail(prog, message, code=2):
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage + message
        fail(self.prog, message)


def pyplot(prog):
    """matplotlib.pyplot with the Agg backend; `prog` names the tool in the error line."""
    try:
        import matplotlib
    except ImportError:
        if (os.access(SYSTEM_PYTHON, os.X_OK) and
                os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)):
            script = os.path.abspath(sys.argv[0])
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, script] + sys.argv[1:])
        fail(prog, f"matplotlib is not installed for {sys.executable} (Debian: "
             "python3-matplotlib; tools/setup.sh installs it)", code=1)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read_csv(prog, path, needed, what):
    """The rows of CSV table `path` (dicts by column), which must have the columns `needed`
    (`what` names the table in the error line)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
    except OSError as e:
        fail(prog, f"{path}: {e.strerror}")
    except (csv.Error, UnicodeDecodeError) as e:
        fail(prog, f"{path}: not a CSV ({e})")
    if any(k not in (reader.fieldnames or []) for k in needed):
        fail(prog, f"{path}: not {what} (needs the columns {', '.join(needed)})")
    return rows


def check_out(prog, out, name="--out"):
    """The output (`name`: how the tool's usage calls it) must name a file in an existing
    directory (checked before any input is read)."""
    out_dir = os.path.dirname(out) or "."
    if os.path.isdir(out):
        fail(prog, f"{name} {out} is a directory")
    if not os.path.isdir(out_dir):
        fail(prog, f"{name} {out}: directory {out_dir} does not exist")


def save(prog, plt, fig, out, name="--out"):
    """Lays the figure out, writes it as PNG and closes it."""
    fig.tight_layout()
    try:
        fig.savefig(out, format="png")
    except OSError as e:
        fail(prog, f"{name} {out}: {e.strerror}")
    plt.close(fig)
