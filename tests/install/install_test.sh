#!/usr/bin/env bash
# Installs libshardtrain into a temporary prefix with install/layout.sh (as tools/install.sh
# does, from the files of this build), moves it elsewhere, then uses only the moved copy, as a
# project outside Bazel:
#   - the shared library is named for its major.minor version (soname, links, what programs
#     record), exports exactly the functions declared in shardtrain.h, and the static
#     archive defines no other strong global symbol (its internal names are local), nor a weak
#     one under the cuDNN frontend's namespace;
#   - neither links cuBLASLt or cuDNN (the CUDA backend opens them when it makes a context); the
#     shared library records no run-time search path; the header compiles alone as C89-C17
#     and C++11-C++20 with -Wall -Wextra -pedantic -Werror;
#   - CMake (tests/install/CMakeLists.txt, find_package(shardtrain)) builds mlp_consumer.cc
#     against shardtrain::shardtrain and against shardtrain::shardtrain_static, and the C
#     program c_consumer.c, which defines names the library uses internally, against the latter;
#   - `c++ mlp_consumer.cc $(pkg-config --cflags --libs shardtrain)` builds it against the
#     shared library, and the same with `pkg-config --static` against the archive; `cc` builds
#     c_consumer.c both ways;
# and every program passes on 1 and on 4 ranks. Where the library was built with sanitizers
# (--config=asan), the programs are too: an instrumented library needs an instrumented program.
set -euo pipefail
tmp=$(realpath "$(mktemp -d "${TEST_TMPDIR:-/tmp}/install.XXXXXX")")
trap 'rm -rf "$tmp"' EXIT
# Laid out in one place and used from another, as a staged package or a copied prefix is: the
# package files find the tree from where they are, not from where it was made.
bash install/layout.sh "$tmp/staged" install/libshardtrain.so install/libshardtrain.a \
  install/libshardtrain.link include/shardtrain.h
prefix=$tmp/prefix
mv "$tmp/staged" "$prefix"

fail() { echo "FAIL: $*" >&2; exit 1; }

# The exports: every function the header declares, found by the compiler's reading of it (not
# the line pattern the version script is made with), and nothing else. An export is a global,
# weak or unique symbol (nm's capitals, u, v, w): the dynamic symbol table also lists local
# thread-local variables for their relocations (the cuDNN frontend's), which no other module
# can bind to.
want=$(c++ -E -P -x c include/shardtrain.h | grep -oE '\bst_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u)
got=$(nm -D --defined-only "$prefix/lib/libshardtrain.so" | awk '$2 ~ /^[A-Zuvw]$/ {print $3}' |
  sort)
[ "$(wc -l <<< "$want")" -gt 20 ] || fail "too few functions found in shardtrain.h"
[ "$want" = "$got" ] || fail "exports differ from shardtrain.h: $(diff <(echo "$want") <(echo "$got"))"

# No run-time search path of its own: where the library's dependencies are is the system's
# business (and a path of the build machine would be wrong on the user's).
# (grep without -q: under pipefail, a grep that quits at its first match can fail the pipe.)
if readelf -d "$prefix/lib/libshardtrain.so" | grep -E '\((RPATH|RUNPATH)\)' > /dev/null; then
  fail "libshardtrain.so records a run-time search path: $(readelf -d "$prefix/lib/libshardtrain.so" | grep -E 'R(UN)?PATH')"
fi

# The header on its own, in every C and C++ standard a research code base may use, pedantic.
for std in c89 c99 c11 c17; do
  echo '#include <shardtrain.h>' | cc -std=$std -Wall -Wextra -pedantic -Werror -fsyntax-only \
    -I"$prefix/include" -x c - || fail "shardtrain.h does not compile as -std=$std"
done
for std in c++11 c++14 c++17 c++20; do
  echo '#include <shardtrain.h>' | c++ -std=$std -Wall -Wextra -pedantic -Werror -fsyntax-only \
    -I"$prefix/include" -x c++ - || fail "shardtrain.h does not compile as -std=$std"
done

# The archive's strong global definitions (nm's capitals but U, V and W) are the same functions;
# weak and unique ones are C++ inline functions and template instances (CUDA builds).
strong=$(nm --defined-only --extern-only "$prefix/lib/libshardtrain.a" |
  awk 'NF == 3 && $2 ~ /^[A-TX-Z]$/ {print $3}' | sort)
[ "$want" = "$strong" ] ||
  fail "the archive's global definitions differ from shardtrain.h: $(diff <(echo "$want") <(echo "$strong"))"
# The cuDNN frontend's templates are instantiated in the archive as weak definitions, under a
# namespace of our own (kernels/cuda/BUILD): a program using another version of the frontend
# keeps its own copies: none may be left under the frontend's name (nm -C: in a type or a
# function's scope alike).
stray=$(nm -C --defined-only "$prefix/lib/libshardtrain.a" | awk '$2 ~ /^[uVW]$/' |
  grep -E '(^|[^_])cudnn_frontend::' | head -3 || true)
[ -z "$stray" ] || fail "the archive defines the cuDNN frontend's own names: $stray"
# c_consumer.c's own definitions under internal names, which the archive must have for the
# program to test anything.
mapfile -t own < <(sed -n '/^\/\* The program.s own/,/^$/p' tests/install/c_consumer.c |
  sed -nE 's/^(const )?[a-z]+ \**([a-z_]+)(\[[0-9]+\])? ?[=(].*/\2/p')
[ "${#own[@]}" -ge 5 ] || fail "too few definitions found in c_consumer.c"
defined=$(nm --defined-only "$prefix/lib/libshardtrain.a" | awk 'NF == 3 {print $3}')
for name in "${own[@]}"; do
  grep -qx "$name" <<< "$defined" || fail "libshardtrain.a has no $name: pick another name in c_consumer.c"
done

# The shared library is named for its major.minor version (a minor version may change the ABI
# while the major is 0): installed under the full version with the links a loader and a linker
# look for, and recorded under major.minor by every program built against it (checked below).
version_part() { sed -nE "s/^#define ST_VERSION_$1 ([0-9]+)$/\1/p" include/shardtrain.h; }
soname=libshardtrain.so.$(version_part MAJOR).$(version_part MINOR)
real=$soname.$(version_part PATCH)
[ -f "$prefix/lib/$real" ] && [ ! -L "$prefix/lib/$real" ] || fail "no $prefix/lib/$real"
[ "$(readlink "$prefix/lib/$soname")" = "$real" ] || fail "$soname does not link to $real"
[ "$(readlink "$prefix/lib/libshardtrain.so")" = "$soname" ] ||
  fail "libshardtrain.so does not link to $soname"
readelf -d "$prefix/lib/$real" | grep "(SONAME).*\[$soname\]" > /dev/null ||
  fail "the shared library's soname is not $soname: $(readelf -d "$prefix/lib/$real" | grep SONAME)"

# cuBLASLt and cuDNN are opened when a CUDA context is made, never linked: loading cuBLASLt
# costs every process a tenth of a second (kernels/cuda/cublaslt_library.h). The .pc file names
# what the archive's users link.
needed=$(readelf -d "$prefix/lib/libshardtrain.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
if grep -E 'libcublas|libcudnn' <<< "$needed"; then fail "libshardtrain.so links the above"; fi
if grep -E 'cublas|cudnn' "$prefix/lib/pkgconfig/shardtrain.pc"; then
  fail "shardtrain.pc links the above"
fi

sanitize=()
undefined=$(nm -D --undefined-only "$prefix/lib/libshardtrain.so")
if grep -q ' __asan_init$' <<< "$undefined"; then
  # As .bazelrc's asan configuration.
  sanitize=("-fsanitize=address,undefined" "-fno-sanitize-recover=undefined")
fi

cmake -S tests/install -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_FLAGS="${sanitize[*]}" -DCMAKE_C_FLAGS="${sanitize[*]}" > "$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; fail "cmake could not configure tests/install"; }
cmake --build "$tmp/cmake" -j 2 > "$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; fail "cmake could not build the consumer"; }

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046 # pkg-config's output is words by design
c++ "${sanitize[@]}" tests/cxx/mlp_consumer.cc $(pkg-config --cflags --libs shardtrain) \
  -o "$tmp/mlp_consumer_pkgconfig" || fail "the pkg-config build failed"
# The same against the archive: -l:libshardtrain.a, since -lshardtrain would take the .so.
# shellcheck disable=SC2046
c++ "${sanitize[@]}" tests/cxx/mlp_consumer.cc $(pkg-config --cflags shardtrain) \
  $(pkg-config --static --libs shardtrain | sed 's/-lshardtrain\b/-l:libshardtrain.a/') \
  -o "$tmp/mlp_consumer_pkgconfig_static" || fail "the pkg-config --static build failed"
# shellcheck disable=SC2046
cc "${sanitize[@]}" tests/install/c_consumer.c $(pkg-config --cflags --libs shardtrain) -lm \
  -o "$tmp/c_consumer_pkgconfig" || fail "the C pkg-config build failed"
# shellcheck disable=SC2046
cc "${sanitize[@]}" tests/install/c_consumer.c $(pkg-config --cflags shardtrain) \
  $(pkg-config --static --libs shardtrain | sed 's/-lshardtrain\b/-l:libshardtrain.a/') -lm \
  -o "$tmp/c_consumer_pkgconfig_static" || fail "the C pkg-config --static build failed"

# CMake records PREFIX/lib as its program's run-time path: it starts with nothing else to go on.
ldd "$tmp/cmake/mlp_consumer_shared" | grep "$soname => $prefix/lib/$soname " > /dev/null ||
  fail "the CMake-built program does not find $soname by itself: $(ldd "$tmp/cmake/mlp_consumer_shared" | grep shardtrain)"

# A program built with pkg-config alone finds the library as any other: LD_LIBRARY_PATH.
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
shared=("$tmp/cmake/mlp_consumer_shared" "$tmp/mlp_consumer_pkgconfig" "$tmp/c_consumer_pkgconfig")
static=("$tmp/cmake/mlp_consumer_static" "$tmp/mlp_consumer_pkgconfig_static"
  "$tmp/cmake/c_consumer_static" "$tmp/c_consumer_pkgconfig_static")
for program in "${shared[@]}" "${static[@]}"; do
  for ranks in 1 4; do
    echo "== $(basename "$program") on $ranks rank(s)"
    bash tests/mpirun.sh "$ranks" "$program" || fail "$(basename "$program") on $ranks rank(s)"
  done
done
# The programs took the installed copy: the shared one loads it, the static ones none.
for program in "${shared[@]}"; do
  readelf -d "$program" | grep "(NEEDED).*\[$soname\]" > /dev/null ||
    fail "$(basename "$program") does not record $soname"
  ldd "$program" | grep "$soname => $prefix/lib/$soname " > /dev/null ||
    fail "$(basename "$program") does not load $prefix/lib/$soname"
done
for program in "${static[@]}"; do
  if ldd "$program" | grep libshardtrain > /dev/null; then
    fail "$(basename "$program") loads libshardtrain.so"
  fi
done
echo "PASS: installed libshardtrain used through CMake and pkg-config, shared and static"
