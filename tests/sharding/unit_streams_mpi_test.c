/* unit_streams_mpi_test.c - a unit's stream-ordered gather and reduction moving real data over a
 * real mesh (1 x world x 1), checked on every rank: the gathered parameters, gathered again into
 * the pooled buffer after a release, and the reduced owned gradients, each read back through
 * the compute stream after the host's one wait; at stages 0 and 3. Inputs are small integers,
 * so the sums are exact. `--device cuda` runs it on GPUs (NCCL with one GPU per rank, else MPI
 * through pinned staging) and prints SKIP without one. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "sharding/mesh.h"
#include "sharding/unit.h"
#include "tests/testing_mpi.h"

#define ROWS 37
#define COLS 29

/* Reads `count` fp32 elements of device memory through C, after everything C was given. */
static void read_back(unit *u, const void *src, float *out, int64_t count) {
  CHECK_OK(stream_memcpy(u->streams->compute, out, src, (size_t)count * sizeof(float)));
  CHECK_OK(unit_streams_step_end(u->streams));
}

static void check_params(unit *u, const float *expected, float *host, const char *when) {
  CHECK_OK(unit_gather_wait(u));
  read_back(u, u->params, host, u->layout.numel);
  int bad = 0;
  for (int64_t i = 0; i < ROWS * COLS; i++) bad += host[i] != expected[i];
  CHECK_MSG(bad == 0, "%s: %d gathered parameters differ", when, bad);
}

static void run(const st_mesh *mesh, int stage, int rank, int world) {
  const st_device *dev = mesh_device(mesh);
  st_stream compute;
  CHECK_OK(stream_create(dev, &compute));
  const unit_groups groups = {mesh_comm(mesh, ST_GROUP_SHARD), mesh_comm(mesh, ST_GROUP_REPLICATE)};
  unit_streams streams;
  CHECK_OK(unit_streams_create(&streams, dev, &compute, &groups));
  unit u;
  CHECK_OK(unit_init(&u, "u", dev, stage, NULL, &groups, 1, 0));
  CHECK_OK(unit_share_streams(&u, &streams));
  const int64_t shape[2] = {ROWS, COLS};
  CHECK_OK(unit_declare(&u, "w", 2, shape, TP_REPLICATED, 1, NULL));
  CHECK_OK(unit_allocate(&u));
  const int64_t n = u.layout.numel;
  float *values = calloc((size_t)n, sizeof *values), *host = calloc((size_t)n, sizeof *host);
  for (int64_t i = 0; i < ROWS * COLS; i++) values[i] = (float)(i % 97);
  CHECK_OK(unit_set_params(&u, 0, values, ROWS * COLS));

  check_params(&u, values, host, "forward");
  unit_release(&u);
  check_params(&u, values, host, "gathered again");

  /* Rank r's gradients are (r + 1) * (i % 13): the sum is world (world + 1) / 2 * (i % 13). */
  CHECK_OK(unit_grads_begin(&u));
  for (int64_t i = 0; i < n; i++) host[i] = (float)((rank + 1) * (i % 13));
  CHECK_OK(stream_memcpy(&compute, u.grads, host, (size_t)n * sizeof(float)));
  CHECK_OK(unit_reduce_start(&u));
  CHECK_OK(unit_reduce_wait(&u));
  read_back(&u, unit_owned_grads(&u), host, u.owned_numel);
  int bad = 0;
  for (int64_t j = 0; j < u.owned_numel; j++) {
    bad += host[j] != (float)(world * (world + 1) / 2 * ((u.owned_begin + j) % 13));
  }
  CHECK_MSG(bad == 0, "stage %d rank %d: %d reduced gradients differ", stage, rank, bad);
  unit_release(&u);
  CHECK_OK(unit_streams_step_end(&streams));
  free(host);
  free(values);
  unit_free(&u);
  unit_streams_destroy(&streams);
  stream_destroy(&compute);
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  st_mesh_config config = ST_MESH_CONFIG_INIT;
  config.device = argc == 3 && strcmp(argv[1], "--device") == 0 ? argv[2] : "cpu";
  if (strcmp(config.device, "cuda") == 0 && device_cuda_count() == 0) {
    int rc = test_skip("unit_streams_mpi_test --device cuda", "no usable GPU");
    st_finalize();
    return rc;
  }
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &config));
  if (mesh) {
    mem_stats before, after;
    mem_stats_get(&before);
    run(mesh, 3, rank, world);
    run(mesh, 0, rank, world);
    mem_stats_get(&after);
    CHECK_EQ_INT(after.live_blocks, before.live_blocks);
    st_mesh_destroy(mesh);
  }
  int rc = test_finish_mpi("unit_streams_mpi_test");
  st_finalize();
  return rc;
}
