#!/usr/bin/env bash
# Runs a command with NCCL_HOSTID set from the MPI rank, so that every rank of a job looks like
# its own host to NCCL and several ranks may share one GPU (docs/ENVIRONMENT.md):
#   mpirun.sh N nccl_hostid.sh BINARY [ARGS...]
export NCCL_HOSTID="shardtrain-rank-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}"
exec "$@"
