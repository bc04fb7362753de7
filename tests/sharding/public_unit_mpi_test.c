/* public_unit_mpi_test.c - the public unit calls on a real mesh of 4 ranks, checked on every
 * rank:
 * - st_unit_publish_state where some ranks own none of the unit (a parameter of 10 elements: the
 *   unit is cut into equal padded shards, so the last ranks' are all padding). As the header
 *   promises, such a rank publishes without having written anything: on a new unit, whose state
 *   was never reset, the ranks that own something write their parts, the others only publish;
 *   at stages 1-3 every rank then holds the written masters as its parameters and takes an
 *   AdamW step. (Refused on the empty ranks, the collectives of the writers went unmatched.)
 *   The same call on every rank before any state is written is refused on every rank, the empty
 *   ones too (which went on into the gather alone, and waited there for the others).
 * - a unit destroyed after its mesh: st_mesh_destroy leaves the mesh to the unit, which still
 *   gathers, reduces and steps, then frees it (under the sanitizers a freed mesh is caught).
 * `--device cuda` runs it on GPUs (the units' buffers, and the publish's agreement, in device
 * memory; the parameters read back through a stream) and prints SKIP without one. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "core/device.h"
#include "sharding/mesh.h"
#include "tests/testing_mpi.h"

enum { N = 10 };
static const int64_t kShape[1] = {N};
static const char *device = "cpu"; /* --device */

/* The N parameters st_unit_param_data gave (device memory on a GPU), copied to the host. */
static void read_params(const st_mesh *mesh, const float *data, float *host) {
  st_stream s;
  CHECK_OK(stream_create(mesh_device(mesh), &s));
  CHECK_OK(stream_memcpy(&s, host, data, N * sizeof(float)));
  CHECK_OK(stream_sync(&s));
  stream_destroy(&s);
}

static void run(const st_mesh *mesh, int stage, int rank) {
  st_unit_config config = ST_UNIT_CONFIG_INIT;
  config.zero_stage = stage;
  st_unit *u = NULL;
  CHECK_OK(st_unit_create(&u, mesh, "bias", &config));
  if (!u) return;
  CHECK_OK(st_unit_add_param(u, "b", 1, kShape, ST_TP_REPLICATED, NULL));
  CHECK_OK(st_unit_finalize(u));
  int64_t first = 0, count = 0;
  CHECK_OK(st_unit_owned_range(u, 0, &first, &count));
  /* The premise: some rank owns nothing (rank 3 of 4, for any padding of 10 elements). */
  if (rank == 3)
    CHECK_MSG(count == 0, "stage %d: rank 3 owns %lld elements", stage, (long long)count);
  float master[N], zero[N] = {0};
  for (int i = 0; i < N; i++) master[i] = 0.5f * (float)(i + 1);
  int owners = count > 0;
  MPI_Allreduce(MPI_IN_PLACE, &owners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char refusal[64];
  snprintf(refusal, sizeof refusal, "no optimizer state on %d of the 4 ranks", owners);
  CHECK_MSG(st_unit_publish_state(u) == ST_ERR_INVALID_ARG && strstr(st_last_error(), refusal),
            "stage %d rank %d: publish before any write: %s", stage, rank, st_last_error());
  if (count > 0) CHECK_OK(st_unit_write_state(u, 0, master + first, zero, zero));
  CHECK_MSG(st_unit_publish_state(u) == ST_OK, "stage %d rank %d (owns %lld): %s", stage, rank,
            (long long)count, st_last_error());
  float *b = NULL, host[N];
  CHECK_OK(st_unit_gather(u));
  CHECK_OK(st_unit_param_data(u, 0, &b));
  if (b) read_params(mesh, b, host);
  for (int i = 0; b && i < N; i++) {
    CHECK_MSG(host[i] == master[i], "stage %d rank %d: b[%d] = %g, written %g", stage, rank, i,
              host[i], master[i]);
  }
  CHECK_OK(st_unit_release(u));
  CHECK_OK(st_unit_zero_grads(u));
  CHECK_OK(st_unit_gather(u));
  CHECK_OK(st_unit_begin_backward(u));
  CHECK_OK(st_unit_release(u));
  CHECK_OK(st_unit_reduce_grads(u));
  CHECK_OK(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f));
  st_unit_destroy(u);
}

/* The mesh destroyed first: the unit, created on it, still runs a step on its communicators. */
static void unit_outlives_mesh(void) {
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = device;
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  if (!mesh) return;
  st_unit_config config = ST_UNIT_CONFIG_INIT;
  config.zero_stage = 3;
  st_unit *u = NULL;
  CHECK_OK(st_unit_create(&u, mesh, "late", &config));
  const float values[N] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK_OK(st_unit_add_param(u, "b", 1, kShape, ST_TP_REPLICATED, NULL));
  CHECK_OK(st_unit_finalize(u));
  CHECK_OK(st_unit_set_param(u, 0, values));
  CHECK_OK(st_unit_optimizer_reset(u));
  st_mesh_destroy(mesh);
  float *b = NULL, host[N];
  CHECK_OK(st_unit_zero_grads(u));
  CHECK_OK(st_unit_gather(u));
  CHECK_OK(st_unit_param_data(u, 0, &b));
  if (b) read_params(mesh, b, host); /* the mesh the unit holds */
  for (int i = 0; b && i < N; i++) {
    CHECK_MSG(host[i] == values[i], "after st_mesh_destroy: b[%d]", i);
  }
  CHECK_OK(st_unit_begin_backward(u));
  CHECK_OK(st_unit_release(u));
  CHECK_OK(st_unit_reduce_grads(u));
  CHECK_OK(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f));
  st_unit_destroy(u); /* frees the mesh too */
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  if (argc == 3 && strcmp(argv[1], "--device") == 0) device = argv[2];
  if (strcmp(device, "cuda") == 0 && device_cuda_count() == 0) {
    const int rc = test_skip("public_unit_mpi_test --device cuda", "no usable GPU");
    st_finalize();
    return rc;
  }
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = device;
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  int rank = 0;
  if (mesh) {
    st_mesh_coords c;
    CHECK_OK(st_mesh_get_coords(mesh, &c));
    rank = c.world_rank;
    for (int stage = 1; stage <= 3; stage++) run(mesh, stage, rank);
  }
  st_mesh_destroy(mesh);
  unit_outlives_mesh();
  const int failed = test_finish_mpi("public_unit_mpi_test");
  /* After the count, which needs MPI; refused while a mesh or unit lives (the last unit freed its
   * mesh), MPI is left running and mpirun fails the run. */
  CHECK_OK(st_finalize());
  return failed;
}
