#!/usr/bin/env bash
# setup_cudnn_frontend.sh - installs the cuDNN frontend's C++ headers, which the cuDNN attention
# (kernels/cuda/cudnn_attention.cpp, ST_CUDA_ATTENTION=cudnn) is compiled against, into the
# git-ignored third_party/cudnn_frontend/include that Bazel reads. The frontend is header-only;
# its headers come from the pinned wheel of PyPI's nvidia-cudnn-frontend (fetched with pip,
# without dependencies, and checked against its sha256), of which only include/ and the licence
# files are kept. Run by tools/setup.sh; idempotent (nothing to do when that version is there).
# Never fails: without pip or PyPI it prints a note and the project builds without the cuDNN
# attention (the other attention kernels run instead).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

version=1.32.0
wheel=nvidia_cudnn_frontend-$version-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
dest=third_party/cudnn_frontend

# The version of the headers in $dest/include, "" when there are none.
installed_version() {
  local h=$dest/include/cudnn_frontend_version.h
  [ -f "$h" ] || return 0
  awk '/define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION/ {v = v (v == "" ? "" : ".") $3}
       END {print v}' "$h"
}

note() {
  echo "setup: cuDNN frontend $version not installed ($1); the build goes on without the cuDNN" \
    "attention (ST_CUDA_ATTENTION=cudnn runs the flash kernels instead)" >&2
  exit 0
}

[ "$(installed_version)" = "$version" ] && exit 0
python3 -m pip --version > /dev/null 2>&1 || note "python3 -m pip is not available"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheel for one fixed platform and Python: every wheel of a version holds the same headers,
# and one fixed file can be checked against its hash.
# Bounded: a package index that hangs instead of refusing must not hold the setup for long.
timeout 120 python3 -m pip download --quiet --timeout 15 --retries 1 --no-deps --only-binary=:all: \
  --platform manylinux_2_28_x86_64 \
  --python-version 3.11 --implementation cp --abi cp311 --dest "$tmp" \
  "nvidia-cudnn-frontend==$version" > "$tmp/pip.log" 2>&1 ||
  note "pip download failed: $(tail -1 "$tmp/pip.log")"
[ -f "$tmp/$wheel" ] || note "pip did not fetch $wheel"
echo "$sha256  $tmp/$wheel" | sha256sum --check --quiet > /dev/null 2>&1 ||
  note "$wheel does not have the pinned sha256"
python3 - "$tmp/$wheel" "$tmp/unpacked" <<'PY' || note "cannot unpack $wheel"
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    keep = [n for n in z.namelist()
            if n.startswith("include/") or ".dist-info/licenses/" in n]
    z.extractall(out, members=keep)
PY
[ -f "$tmp/unpacked/include/cudnn_frontend.h" ] || note "$wheel holds no include/cudnn_frontend.h"
rm -rf "$dest/include" "$dest/licenses"
mkdir -p "$dest/licenses"
mv "$tmp/unpacked/include" "$dest/include"
mv "$tmp"/unpacked/*.dist-info/licenses/* "$dest/licenses/"
echo "setup: installed the cuDNN frontend $version headers into $dest/include" >&2
# Bazel's configure rule (cudnn_frontend_configure.bzl) looks at the folder when its server
# starts: stop this workspace's server, so the next build sees the headers.
if command -v bazel > /dev/null && [ -e bazel-out ]; then
  bazel shutdown > /dev/null 2>&1 || true
fi
exit 0
