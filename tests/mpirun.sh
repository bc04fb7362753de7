#!/usr/bin/env bash
# Runs a test binary on N MPI ranks inside `bazel test`: mpirun.sh N BINARY [ARGS...].
# Oversubscribes the two-core machines and keeps ranks off fixed cores.
#
# Open MPI names its session directory after mpirun's pid, and each Bazel sandbox has its own
# pid namespace, so two tests running at once would share one directory under a common TMPDIR.
# The sandbox's TEST_TMPDIR is unique but too long for Open MPI's socket and backing-file
# names, hence a short unique directory of our own, removed on exit. The shared-memory
# transport's segments (in /dev/shm by default, named after the same pid) go there too.
set -uo pipefail
ranks=$1
shift
# Under --config=asan: Open MPI unloads its plugins at MPI_Finalize, so LeakSanitizer cannot
# even name the allocations they keep (and so cannot suppress them). Leak detection is off for
# multi-rank programs; every multi-rank test instead asserts that the library's allocator has
# no live block left at the end. Address and undefined-behaviour checks stay on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
session=$(mktemp -d /tmp/st-mpi.XXXXXX)
trap 'rm -rf "$session"' EXIT
TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session mpirun -np "$ranks" --oversubscribe --bind-to none "$@"
