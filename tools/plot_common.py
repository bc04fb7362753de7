"""plot_common.py - what the plotting tools (plot_metrics.py, plot_scaling.py, plot_bench.py)
share: matplotlib's pyplot drawing to files without a display (the Agg backend), the checks of
--out before anything is read, saving a figure, and the one-line error of a bad input (exit 2).

A python3 of its own (pyenv, a virtualenv) does not see Debian's python3-matplotlib: then the
calling script is run again, with the same arguments, by the system's python3, which does. Where
no python3 has matplotlib: one error line naming the interpreter, exit 1.
"""
import argparse
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


def check_out(prog, out):
    """--out must name a file in an existing directory (checked before any input is read)."""
    out_dir = os.path.dirname(out) or "."
    if os.path.isdir(out):
        fail(prog, f"--out {out} is a directory")
    if not os.path.isdir(out_dir):
        fail(prog, f"--out {out}: directory {out_dir} does not exist")


def save(prog, plt, fig, out):
    """Lays the figure out, writes it as PNG and closes it."""
    fig.tight_layout()
    try:
        fig.savefig(out, format="png")
    except OSError as e:
        fail(prog, f"--out {out}: {e.strerror}")
    plt.close(fig)
