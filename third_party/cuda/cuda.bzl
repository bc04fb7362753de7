"""cuda_library: compiles .cu files with nvcc for Hopper (sm_90 SASS + compute_90 PTX).

Each .cu is compiled by one nvcc action whose inputs are the file, the headers of its deps
and the toolkit's device headers (@local_cuda//:device_headers: CCCL's cub and the rest, which
only nvcc's actions need); the objects are archived and wrapped as an ordinary cc_library, so
C targets depend on a cuda_library like on any other. No -rdc: each kernel file is self-contained.
"""

load("@local_cuda//:defs.bzl", "NVCC")

_NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "--compiler-options=-fPIC",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-DST_HAVE_CUDA=1",
    # Source lines for the device code, so that compute-sanitizer's reports (the GPU suite's
    # sanitizer section) name them; unlike -G it leaves the optimisation as it is.
    "-lineinfo",
]

def _cuda_archive_impl(ctx):
    cc_infos = [d[CcInfo] for d in ctx.attr.deps + [ctx.attr._device_headers] if CcInfo in d]
    headers = depset(ctx.files.hdrs, transitive = [c.compilation_context.headers for c in cc_infos])
    includes = ["."]
    for c in cc_infos:
        cc = c.compilation_context
        includes += cc.includes.to_list() + cc.quote_includes.to_list() + cc.system_includes.to_list()
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_nvcc/%s/%s.o" % (ctx.label.name, src.basename[:-len(".cu")]))
        args = ctx.actions.args()
        args.add_all(_NVCC_FLAGS)
        args.add_all(includes, format_each = "-I%s")
        args.add_all(["-c", src.path, "-o", obj.path])
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src], transitive = [headers]),
            outputs = [obj],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        objects.append(obj)
    archive = ctx.actions.declare_file("lib%s.a" % ctx.label.name)
    ctx.actions.run(
        executable = "/usr/bin/ar",
        arguments = ["rcs", archive.path] + [o.path for o in objects],
        inputs = objects,
        outputs = [archive],
        mnemonic = "NvccArchive",
    )
    return [DefaultInfo(files = depset([archive]))]

_cuda_archive = rule(
    implementation = _cuda_archive_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(),
        "_device_headers": attr.label(default = "@local_cuda//:device_headers"),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], linkopts = [], **kwargs):
    _cuda_archive(name = name + "_archive", srcs = srcs, hdrs = hdrs, deps = deps)
    native.cc_import(
        name = name + "_import",
        static_library = ":" + name + "_archive",
        alwayslink = 1,
    )
    native.cc_library(
        name = name,
        hdrs = hdrs,
        # The archive first: with static linking, the libraries it calls into (core, cuBLASLt,
        # cudart) must come after it on the link line.
        deps = [":" + name + "_import"] + deps + ["@local_cuda//:cudart"],
        # nvcc's host code is C++ (exceptions, static-local guards): a program linked by the C
        # compiler, or the installed static archive's users, need the C++ runtime named.
        linkopts = linkopts + ["-lstdc++"],
        **kwargs
    )
