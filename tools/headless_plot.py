"""headless_plot.py - matplotlib's pyplot for the plotting tools (plot_metrics.py,
plot_scaling.py, plot_bench.py), drawing to files without a display (the Agg backend).

A python3 of its own (pyenv, a virtualenv) does not see Debian's python3-matplotlib: then the
calling script is run again, with the same arguments, by the system's python3, which does. Where
no python3 has matplotlib: one error line naming the interpreter, exit 1.
"""
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"  # where Debian's python3-matplotlib is importable


def pyplot(prog):
    """matplotlib.pyplot with the Agg backend; `prog` names the tool in the error line."""
    try:
        import matplotlib
    except ImportError:
        if (os.access(SYSTEM_PYTHON, os.X_OK) and
                os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)):
            script = os.path.abspath(sys.argv[0])
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, script] + sys.argv[1:])
        print(f"{prog}: error: matplotlib is not installed for {sys.executable} (Debian: "
              "python3-matplotlib; tools/setup.sh installs it)", file=sys.stderr)
        sys.exit(1)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
