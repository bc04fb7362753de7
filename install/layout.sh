#!/usr/bin/env bash
# Lays out an installed libshardtrain from the files Bazel built in this package:
#   layout.sh PREFIX LIBSHARDTRAIN_SO LIBSHARDTRAIN_A LIBSHARDTRAIN_LINK SHARDTRAIN_H
# writes PREFIX/lib/libshardtrain.so.MAJOR.MINOR.PATCH (with the links libshardtrain.so.MAJOR.MINOR,
# its soname, and libshardtrain.so, the name -lshardtrain finds), PREFIX/lib/libshardtrain.a,
# PREFIX/include/shardtrain.h,
# PREFIX/lib/pkgconfig/shardtrain.pc and PREFIX/lib/cmake/shardtrain/shardtrainConfig.cmake
# (with shardtrainConfigVersion.cmake). The package files come from the templates beside this
# script: the version from the header, what the static archive links to from the .link file
# (bundle.bzl), MPI from the `mpicc` on PATH, the one the build's configure rule asked.
# tools/install.sh and tests/install both use it, so the test checks the layout users get.
set -euo pipefail
if [ $# -ne 5 ]; then
  echo "usage: $0 PREFIX LIBSHARDTRAIN_SO LIBSHARDTRAIN_A LIBSHARDTRAIN_LINK SHARDTRAIN_H" >&2
  exit 2
fi
prefix=$(realpath -m "$1")
so=$2
archive=$3
link=$4
header=$5
templates=$(dirname "$0")

version_part() { sed -nE "s/^#define ST_VERSION_$1 ([0-9]+)$/\1/p" "$header"; }
major=$(version_part MAJOR)
minor=$(version_part MINOR)
patch=$(version_part PATCH)
if [ -z "$major" ] || [ -z "$minor" ] || [ -z "$patch" ]; then
  echo "layout.sh: no ST_VERSION_MAJOR/MINOR/PATCH in $header" >&2
  exit 1
fi
version=$major.$minor.$patch

# MPI as Open MPI's compiler wrapper reports it (mpi_configure.bzl reads the same wrapper).
mpi_include_dirs=$(mpicc --showme:incdirs)
mpi_libraries=()
for lib in $(mpicc --showme:libs); do
  found=-l$lib
  for dir in $(mpicc --showme:libdirs); do
    if [ -e "$dir/lib$lib.so" ]; then found=$dir/lib$lib.so; break; fi
  done
  mpi_libraries+=("$found")
done

mapfile -t static_needs < "$link"

# Fills the @NAME@ fields of a template (quoted replacements: bash 5.2 would read & in them).
fill() {
  local text
  text=$(< "$templates/$1")
  text=${text//@VERSION@/"$version"}
  text=${text//@VERSION_MAJOR@/"$major"}
  text=${text//@VERSION_MINOR@/"$minor"}
  text=${text//@LIBS_PRIVATE@/"${static_needs[*]}"}
  local IFS=';'
  text=${text//@MPI_INCLUDE_DIRS@/"$(tr ' ' ';' <<< "$mpi_include_dirs")"}
  text=${text//@MPI_LIBRARIES@/"${mpi_libraries[*]}"}
  text=${text//@STATIC_LINK_LIBRARIES@/"${static_needs[*]}"}
  printf '%s\n' "$text" > "$2"
  chmod 0644 "$2"
}

mkdir -p "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/shardtrain"
install -m 0755 "$so" "$prefix/lib/libshardtrain.so.$version"
ln -sfn "libshardtrain.so.$version" "$prefix/lib/libshardtrain.so.$major.$minor"
ln -sfn "libshardtrain.so.$major.$minor" "$prefix/lib/libshardtrain.so"
install -m 0644 "$archive" "$prefix/lib/libshardtrain.a"
install -m 0644 "$header" "$prefix/include/shardtrain.h"
fill shardtrain.pc.in "$prefix/lib/pkgconfig/shardtrain.pc"
fill shardtrainConfig.cmake.in "$prefix/lib/cmake/shardtrain/shardtrainConfig.cmake"
fill shardtrainConfigVersion.cmake.in "$prefix/lib/cmake/shardtrain/shardtrainConfigVersion.cmake"
