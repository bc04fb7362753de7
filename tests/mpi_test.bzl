"""mpi_cc_test: one C or C++ test program run under mpirun at several rank counts.

Creates the binary `<name>_bin` and, for each entry of `ranks`, an sh_test `<name>_np<N>` that
runs it through tests/mpirun.sh. A multi-rank test program reports failures on every rank and
exits non-zero on every rank when any rank failed.
"""

def mpi_cc_test(name, srcs, ranks, deps = [], args = [], tags = [], size = "small", **kwargs):
    native.cc_binary(
        name = name + "_bin",
        srcs = srcs,
        deps = deps + ["//tests:testing_mpi"],
        testonly = 1,
        **kwargs
    )
    for n in ranks:
        native.sh_test(
            name = "%s_np%d" % (name, n),
            srcs = ["//tests:mpirun.sh"],
            args = [str(n), "$(location :%s_bin)" % name] + args,
            data = [":%s_bin" % name],
            tags = tags + ["mpi"],
            size = size,
        )
