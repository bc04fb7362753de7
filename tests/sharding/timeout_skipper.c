/* timeout_skipper.c - the program behind timeout_test.sh and device_wait_timeout_test.sh: every
 * rank but rank 1 enters an all-reduce on the world group; rank 1 skips it and waits far longer
 * than the timeout. Reaching the end of main is a failure.
 *   - on the CPU (no arguments), the host waits in comm_wait: the waiting ranks must report the
 *     stuck collective (group, op, sequence number, bytes) and abort the whole job;
 *   - with `--device cuda --backend nccl` the all-reduce is queued on a stream and the host waits
 *     for the stream (stream_sync), where only the device wait's bound (core/device.h) can see
 *     that it never finishes. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "sharding/comm.h"
#include "sharding/mesh.h"

int main(int argc, char **argv) {
  if (st_init(&argc, &argv) != ST_OK) return 10;
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--device") == 0) cfg.device = argv[i + 1];
    if (strcmp(argv[i], "--backend") == 0 && strcmp(argv[i + 1], "nccl") == 0) {
      cfg.backend = ST_COMM_NCCL;
    }
  }
  st_mesh *mesh = NULL;
  if (st_mesh_create(&mesh, &cfg) != ST_OK) {
    fprintf(stderr, "timeout_skipper: %s\n", st_last_error());
    return 11;
  }
  st_mesh_coords c;
  st_mesh_get_coords(mesh, &c);
  comm *world = mesh_comm(mesh, ST_GROUP_WORLD);
  const st_device *dev = mesh_device(mesh);
  float *data = NULL;
  st_stream stream;
  if (mem_alloc((void **)&data, 256 * sizeof *data, MEM_DEVICE, MEM_COMM, dev) != ST_OK ||
      stream_create(dev, &stream) != ST_OK ||
      stream_memset(&stream, data, 0, 256 * sizeof *data) != ST_OK ||
      stream_sync(&stream) != ST_OK) {
    fprintf(stderr, "timeout_skipper: %s\n", st_last_error());
    return 12;
  }
  comm_all_reduce(world, data, data, 1, ST_FP32, COMM_SUM, NULL); /* seq 0: NCCL connects here */
  if (c.world_rank == 1) {
    sleep(120);
  } else if (dev->backend->kind == ST_DEVICE_CPU) {
    comm_all_reduce(world, data, data, 256, ST_FP32, COMM_SUM, NULL); /* seq 1: never completes */
  } else {
    comm_work work;
    comm_all_reduce_on(world, &stream, data, data, 256, ST_FP32, COMM_SUM, &work);
    stream_sync(&stream); /* waits for seq 1, which never completes */
  }
  fprintf(stderr, "rank %d: returned from a collective that should have aborted\n", c.world_rank);
  return 0;
}
