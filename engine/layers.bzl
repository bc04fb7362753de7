# layers.bzl - the engine's packages from the bottom up. A package may depend on the packages
# listed before it and is visible only to those after it (and to tests and benchmarks), so an
# #include or a dep that points upward fails to build instead of slowly tangling the layers.
ENGINE_LAYERS = ["flags", "io", "model", "plan", "train", "checkpoint", "cli"]

def visible_above(layer):
    """The visibility of `layer`'s targets: the engine layers above it, tests and benchmarks."""
    above = ENGINE_LAYERS[ENGINE_LAYERS.index(layer) + 1:]
    return ["//engine/%s:__pkg__" % name for name in above] + [
        "//benchmarks:__subpackages__",
        "//tests:__subpackages__",
    ]
