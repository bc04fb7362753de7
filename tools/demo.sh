#!/usr/bin/env bash
# The README's main job: installs what is missing, builds shardtrain, and runs the built-in
# demo of what the engine can do so far: the collective self-test on 4 ranks arranged as a
# 1 x 2 x 2 mesh (dp_replicate x dp_shard x tp), every collective on every group, checked.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //engine:shardtrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun -np 4 --oversubscribe --bind-to none bazel-bin/engine/shardtrain selftest \
  --dp-replicate 1 --dp-shard 2 --tp 2 "$@"
