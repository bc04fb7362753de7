/* timeout_skipper.c - the program behind timeout_test.sh: every rank but rank 1 enters an
 * all-reduce on the world group; rank 1 skips it and waits far longer than the timeout. The
 * waiting ranks must report the stuck collective (group, op, sequence number, bytes) and
 * abort the whole job, rank 1 included. Reaching the end of main is a failure. */
#include <stdio.h>
#include <unistd.h>

#include "sharding/comm.h"
#include "sharding/mesh.h"

int main(int argc, char **argv) {
  if (st_init(&argc, &argv) != ST_OK) return 10;
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  st_mesh *mesh = NULL;
  if (st_mesh_create(&mesh, &cfg) != ST_OK) return 11;
  st_mesh_coords c;
  st_mesh_get_coords(mesh, &c);
  comm *world = mesh_comm(mesh, ST_GROUP_WORLD);
  float warmup = 1.0f, data[256] = {0};
  comm_all_reduce(world, &warmup, &warmup, 1, ST_FP32, COMM_SUM, NULL); /* seq 0 */
  if (c.world_rank == 1) {
    sleep(120);
  } else {
    comm_all_reduce(world, data, data, 256, ST_FP32, COMM_SUM, NULL); /* seq 1: never completes */
  }
  fprintf(stderr, "rank %d: returned from a collective that should have aborted\n", c.world_rank);
  return 0;
}
