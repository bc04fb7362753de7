#!/usr/bin/env bash
# The two actions of cc_bundle (bundle.bzl), run from the execution root:
#   bundle.sh archive OUT.a [--obj=FILE]... [--ar=ARCHIVE]...
#     one archive holding the objects, then every member of the archives;
#   bundle.sh link-file OUT [--lib=FILE | --flag=FLAG]...
#     one linker argument per line, in the given order: a library file as the path of the
#     system file behind its repository's symlinks (under the name the build linked, e.g.
#     libnccl.so rather than the libnccl.so.2.x it points to; a file reached under two names
#     is written once), a flag as it is.
set -euo pipefail
mode=$1
out=$2
shift 2

case $mode in
  archive)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    members=()
    n=0
    for arg in "$@"; do
      case $arg in
        --obj=*) members+=("${arg#--obj=}") ;;
        --ar=*)
          # Members of different archives may share a name: each archive gets its own folder.
          n=$((n + 1))
          src=$(realpath "${arg#--ar=}")
          mkdir "$tmp/$n"
          (cd "$tmp/$n" && ar x "$src")
          mapfile -t names < <(ar t "$src")
          members+=("${names[@]/#/$tmp/$n/}")
          ;;
        *) echo "bundle.sh: unknown argument $arg" >&2; exit 2 ;;
      esac
    done
    rm -f "$out"
    # q (append) rather than r: r would let an object replace an earlier one of the same name.
    ar qcD "$out" "${members[@]}"
    ranlib -D "$out"
    ;;
  link-file)
    declare -A seen=()
    for arg in "$@"; do
      case $arg in
        --lib=*)
          file=${arg#--lib=}
          real=$(readlink -f "$file")
          [ -z "${seen[$real]:-}" ] || continue
          seen[$real]=1
          named="$(dirname "$real")/$(basename "$file")"
          if [ -e "$named" ]; then echo "$named"; else echo "$real"; fi
          ;;
        --flag=*) echo "${arg#--flag=}" ;;
        *) echo "bundle.sh: unknown argument $arg" >&2; exit 2 ;;
      esac
    done > "$out"
    ;;
  *) echo "bundle.sh: unknown mode $mode" >&2; exit 2 ;;
esac
