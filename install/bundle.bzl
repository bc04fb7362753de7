"""cc_bundle: a cc_library and every library of this repository it depends on, as one archive.

Bazel 4 has no cc_static_library, and a cc_library's own archive holds only its own objects.
cc_bundle archives the objects of every library owned by this repository (a library another
repository supplies, such as MPI, OpenBLAS or the CUDA runtime, stays outside) and writes what
that archive still needs at link time, for the installed pkg-config and CMake files:

- `lib<name>.a`: the objects (PIC where the toolchain makes both kinds, so the archive can also
  go into a user's shared library) linked into one relocatable object whose only global
  functions and variables are the `exports` (weak C++ template instances stay weak): the
  library's internal names (`mem_alloc`, `dtype_size`, ...) cannot clash with a program's own;
- `lib<name>.link`: one linker argument per line, ordered as Bazel orders a link: the files of
  the outside libraries (static or shared, as absolute paths of the system's files), then the
  link flags of every library in the closure (-lopenblas, -fopenmp, ...); both leave out the
  `provided` libraries (MPI, which the installed files declare as a public requirement).

Its CcInfo links the archive whole (alwayslink) together with the outside libraries, so a
cc_binary(linkshared = 1) over it is the shared library with the same contents.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _own(owner):
    return owner.workspace_name == ""

def _keep_last(items):
    """Drops all but the last occurrence of each item: a library stays after its users."""
    seen = {}
    out = []
    for item in reversed(items):
        if item not in seen:
            seen[item] = True
            out.append(item)
    return reversed(out)

def _without_search_paths(owner, linker_input):
    """The linker input with its shared libraries named by path among the link flags.

    Bazel links a shared library it knows of through a symlink in its output tree and adds that
    symlink's folder to the run-time search path, which would leave an installed
    libshardtrain.so searching a folder that is not installed. Named by path, the library is
    found at run time as the system finds it.
    """
    static, shared = [], []
    for lib in linker_input.libraries:
        if lib.pic_static_library or lib.static_library:
            static.append(lib)
        elif lib.dynamic_library:
            shared.append(lib.dynamic_library)
    if not shared:
        return linker_input
    return cc_common.create_linker_input(
        owner = owner,
        libraries = depset(static),
        user_link_flags = depset(linker_input.user_link_flags + [f.path for f in shared]),
        additional_inputs = depset(shared),
    )

def _cc_bundle_impl(ctx):
    cc_info = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    provided = [d.label for d in ctx.attr.provided]
    objects, archives, own_flags = [], [], []
    outside_inputs, outside_files, link_libs, link_flags = [], [], [], []
    for linker_input in cc_info.linking_context.linker_inputs.to_list():
        owner = linker_input.owner
        if _own(owner):
            for lib in linker_input.libraries:
                objs = lib.pic_objects or lib.objects
                if objs:
                    objects += objs
                elif lib.pic_static_library or lib.static_library:
                    archives.append(lib.pic_static_library or lib.static_library)
                else:
                    fail("%s: %s has neither objects nor a static library to bundle" %
                         (ctx.label, owner))
            own_flags += linker_input.user_link_flags
        else:
            outside_inputs.append(_without_search_paths(owner, linker_input))
            if owner not in provided:
                for lib in linker_input.libraries:
                    f = lib.pic_static_library or lib.static_library or lib.dynamic_library
                    if f:
                        outside_files.append(f)
                        link_libs.append(f)
        if owner not in provided:
            link_flags += linker_input.user_link_flags

    archive = ctx.actions.declare_file("lib%s.a" % ctx.attr.lib_name)
    args = ctx.actions.args()
    args.add_all(["archive", archive, "--exports=" + ctx.file.exports.path])
    args.add_all(objects, format_each = "--obj=%s")
    args.add_all(archives, format_each = "--ar=%s")
    ctx.actions.run(
        executable = ctx.executable._bundle_sh,
        arguments = [args],
        inputs = objects + archives + [ctx.file.exports],
        outputs = [archive],
        mnemonic = "CcBundle",
        progress_message = "Bundling %s" % archive.short_path,
    )

    link_file = ctx.actions.declare_file("lib%s.link" % ctx.attr.lib_name)
    link_args = ctx.actions.args()
    link_args.add_all(["link-file", link_file])
    link_args.add_all(link_libs, format_each = "--lib=%s")
    link_args.add_all(_keep_last(link_flags), format_each = "--flag=%s")
    ctx.actions.run(
        executable = ctx.executable._bundle_sh,
        arguments = [link_args],
        inputs = outside_files,
        outputs = [link_file],
        mnemonic = "CcBundleLinkFile",
    )

    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    bundle = cc_common.create_library_to_link(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        pic_static_library = archive,
        alwayslink = True,
    )
    own_input = cc_common.create_linker_input(
        owner = ctx.label,
        libraries = depset([bundle]),
        user_link_flags = depset(_keep_last(own_flags)),
    )
    linking_context = cc_common.create_linking_context(
        linker_inputs = depset([own_input] + outside_inputs, order = "topological"),
    )
    return [
        DefaultInfo(
            files = depset([archive, link_file]),
            runfiles = ctx.runfiles(files = [archive, link_file]),
        ),
        CcInfo(
            compilation_context = cc_info.compilation_context,
            linking_context = linking_context,
        ),
    ]

cc_bundle = rule(
    implementation = _cc_bundle_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        # The names the archive keeps global, one a line.
        "exports": attr.label(mandatory = True, allow_single_file = True),
        "lib_name": attr.string(mandatory = True),
        "provided": attr.label_list(providers = [CcInfo]),
        "_bundle_sh": attr.label(
            default = ":bundle.sh",
            executable = True,
            cfg = "exec",
            allow_single_file = True,
        ),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
