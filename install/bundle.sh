#!/usr/bin/env bash
# The two actions of cc_bundle (bundle.bzl), run from the execution root:
#   bundle.sh archive OUT.a --exports=NAMES [--obj=FILE]... [--ar=ARCHIVE]...
#     the objects and every member of the archives linked into one relocatable object (ld -r),
#     in which every strong global symbol not named in NAMES (one a line) is made local, then
#     archived alone: the library keeps its internal names to itself, as the shared library's
#     version script does. Weak and unique symbols (C++ inline functions, template instances)
#     stay as they are: they may be COMDAT groups, which a program's own copy may replace;
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
    exports=
    n=0
    for arg in "$@"; do
      case $arg in
        --exports=*) exports=${arg#--exports=} ;;
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
    [ -n "$exports" ] || { echo "bundle.sh: archive needs --exports=NAMES" >&2; exit 2; }
    merged=$tmp/lib$(basename "$out" .a).o
    ld -r -o "$merged" "${members[@]}"
    # nm's capitals other than U (undefined), V and W (weak) are strong definitions.
    nm --defined-only --extern-only "$merged" |
      awk 'NR == FNR { keep[$1] = 1; next }
           NF == 3 && $2 ~ /^[A-TX-Z]$/ && !($3 in keep) { print $3 }' "$exports" - \
      > "$tmp/internal"
    objcopy --localize-symbols="$tmp/internal" "$merged"
    rm -f "$out"
    ar qcD "$out" "$merged"
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
