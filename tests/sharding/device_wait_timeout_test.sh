#!/usr/bin/env bash
# A GPU stream that waits for a collective whose peer never comes: rank 0 queues an all-reduce
# on a stream and waits for the stream (stream_sync) while rank 1 sleeps. The wait must end the
# job within the timeout with the device wait's line (core/device.h, device_bound_waits), not
# hang: nothing else on the host sees a collective that never finishes. Two ranks share the GPU
# through NCCL (nccl_hostid.sh gives each its own NCCL_HOSTID); under the CUDA emulation the
# streams run on worker threads (CUDA_EMU_ASYNC=1), as a GPU's run apart from the host. Prints
# SKIP where no GPU is usable (a failure under ST_TEST_REQUIRE_GPU=1).
#   device_wait_timeout_test.sh MPIRUN_SH NCCL_HOSTID_SH SKIPPER
set -uo pipefail
mpirun_sh=$1
hostid=$2
skipper=$3
# shellcheck source=tests/sharding/stuck_job.sh
. "$(dirname "$0")/stuck_job.sh"
# Not less: ST_COMM_TIMEOUT also bounds NCCL's set-up of the mesh's communicators, over sockets
# between the ranks that share the GPU.
timeout_s=10
limit_s=$((timeout_s + 20))

ST_COMM_TIMEOUT=$timeout_s CUDA_EMU_ASYNC=1 stuck_job "$limit_s" "$mpirun_sh" 2 "$hostid" \
  "$skipper" --device cuda --backend nccl
if grep -q "no usable GPU" <<< "$output" && [ "${ST_TEST_REQUIRE_GPU:-0}" != 1 ]; then
  echo "SKIP device_wait_timeout_test: no usable GPU"
  exit 0
fi
echo "$output"
echo "exit code $rc after ${elapsed}s"
check_ended "$limit_s"
check 'grep -q "a host wait for the cuda device.s queued work (stream_sync), which waits for the collectives queued before it, did not finish within $timeout_s s (ST_COMM_TIMEOUT)" <<< "$output"' \
  "no line naming the device wait and its limit"
[ $fail -eq 0 ] && echo "device_wait_timeout_test: passed" || echo "device_wait_timeout_test: FAILED"
exit $fail
