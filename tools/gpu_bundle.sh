#!/usr/bin/env bash
# gpu_bundle.sh - builds everything the GPU suite runs and packs it for the GPU machine, which
# has CUDA, NCCL and MPI but no Bazel: the binaries (with ../shared/tools/gpu-bundle: the
# libraries that machine lacks and an env.sh) into gpu/, and the fortunes text the byte-level
# data is made from into gpu/fortunes (that machine has no fortunes package), all compressed
# into gpu/bundle.tar.xz beside env.sh and version.txt (the commit built, which
# benchmarks/gpu_bench.sh records). The bundle also carries benchmarks/ceilings for that
# benchmark (docs/PERFORMANCE.md), and op_timings and mpi_p2p for the simulator's GPU
# calibration (the suite's calibrate section, benchmarks/hardware/measure_gpu.sh). Then, with
# the device tool, carry `gpu` and run on the GPU machine, a group of sections a command, each
# with the suite's budget SUITE_BUDGET and the tool's timeout_s = SUITE_BUDGET + 25
# (docs/BUILD.md, "The GPU suite", plans a session's 15 minutes):
#   source gpu/env.sh && SUITE_BUDGET=480 exec bash tests/gpu/run_gpu_suite.sh gpu ops train \
#     streams d12
#   source gpu/env.sh && SUITE_BUDGET=S exec bash tests/gpu/run_gpu_suite.sh gpu d12x4 equivalence
#   source gpu/env.sh && SUITE_BUDGET=S exec bash tests/gpu/run_gpu_suite.sh gpu sanitizer
#   source gpu/env.sh && SUITE_BUDGET=S exec bash tests/gpu/run_gpu_suite.sh gpu calibrate
# (S: the device tool's status, budget_left_s, less 60, at most 575.)
# (tests/gpu/run_gpu_suite.sh lists the sections and what each checks.) The binaries must be a
# real nvcc's: with ST_CUDA_PATH set (the CUDA emulation, tools/cuda_emu) it refuses to start,
# and it checks that the main binary holds device code (a .nv_fatbin section). The emulation's
# rehearsal of the suite (tools/cuda_emu/rehearse_suite.sh) lays out a bundle of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "gpu_bundle: $*" >&2; exit 1; }
[ -z "${ST_CUDA_PATH:-}" ] || die "ST_CUDA_PATH is set ($ST_CUDA_PATH): that builds against it" \
  "(the CUDA emulation, or another toolkit), not for the GPU; unset it"
# shellcheck source=tools/gpu_bundle_targets.sh
. tools/gpu_bundle_targets.sh
[ -f third_party/cudnn_frontend/include/cudnn_frontend.h ] ||
  echo "gpu_bundle: no cuDNN frontend headers (tools/setup.sh installs them): this bundle has" \
    "no cuDNN attention, and ops_vocab_test will fail on ST_CUDA_ATTENTION=cudnn" >&2
bazel build "${bundle_targets[@]}"
../shared/tools/gpu-bundle gpu "${bundle_binaries[@]}"
# A bazel-bin built against the emulation (or without a toolkit) has no device code.
for b in shardtrain ops_vocab_test; do
  case "$(readelf -SW "gpu/bin/$b")" in
    *" .nv_fatbin "*) ;;
    *) die "gpu/bin/$b has no .nv_fatbin section: not built by a real nvcc (the CUDA" \
      "emulation's toolkit, or none found by third_party/cuda/cuda_configure.bzl)" ;;
  esac
done
# ../shared/tools/gpu-bundle writes env.sh with Debian's /usr/lib/x86_64-linux-gnu ahead of the
# image's own LD_LIBRARY_PATH, where the driver's and the image's CUDA libraries may be: that
# line is rewritten to put Debian's directory after them. It must be found exactly as written
# there (a changed tool stops the bundle here rather than ship another order unseen).
# shellcheck disable=SC2016 # env.sh's own text: expanded where it is sourced
{
  ours='export LD_LIBRARY_PATH=$here/lib:/usr/local/cuda/lib64'
  image='${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}'
  debian=:/usr/lib/x86_64-linux-gnu
}
old=$ours$debian$image
new=$ours$image$debian
[ "$(grep -c '^export LD_LIBRARY_PATH=' gpu/env.sh)" = 1 ] && grep -qxF "$old" gpu/env.sh ||
  die "gpu/env.sh's LD_LIBRARY_PATH line is not the one tools/gpu_bundle.sh rewrites" \
    "(../shared/tools/gpu-bundle changed?): $(grep 'LD_LIBRARY_PATH' gpu/env.sh)"
while IFS= read -r line; do
  if [ "$line" = "$old" ]; then printf '%s\n' "$new"; else printf '%s\n' "$line"; fi
done < gpu/env.sh > gpu/env.sh.new
mv gpu/env.sh.new gpu/env.sh
# The rest is appended. compute-sanitizer (the suite's sanitizer section) lives beside nvcc,
# which the GPU machine's PATH may leave out. Open MPI as the tests run it (.bazelrc's test_env),
# each where the environment does not set it: where there is no ssh or rsh (a bare container),
# Open MPI 4.1 starts not even one rank unless told to launch on this node only (plm isolated);
# ranks over shared memory (ob1, self and vader), more ranks than cores.
cat >> gpu/env.sh <<'EOW'
if [ -z "$(command -v compute-sanitizer)" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  export PATH=$PATH:/usr/local/cuda/bin
fi
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-0}
EOW
git describe --always --dirty > gpu/version.txt
mkdir -p gpu/fortunes
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' \
  -exec cp {} gpu/fortunes/ \;
# The device tool carries at most 64 MiB, the working tree included; two dozen binaries that
# each hold the CUDA runtime and the kernels' device code (with -lineinfo's line tables) come
# to about 270 MiB, and what they share is found only by a window that spans them all: one
# stream (no -T2, whose blocks are compressed apart) with a 256 MiB dictionary, about 15 MiB in
# 45 s (xz's default 8 MiB window, binaries of 10 MiB apiece: 53 MiB). Unpacking needs 256 MiB.
# run_gpu_suite.sh unpacks it on the GPU machine.
tar -cf - -C gpu bin lib fortunes | xz -T1 --lzma2=preset=3,dict=256MiB > gpu/bundle.tar.xz
rm -rf gpu/bin gpu/lib gpu/fortunes
du -sh gpu
