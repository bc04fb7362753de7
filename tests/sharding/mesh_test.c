/* mesh_test.c - mesh validation and construction, checked on every rank.
 *
 * Validation is table-driven against the world size (pure, no communication): impossible
 * meshes are refused with messages that name the numbers. Then st_mesh_create is called with
 * impossible meshes on every rank at once: each rank must return ST_ERR_INVALID_ARG with the
 * same message and nobody may hang. Finally every factorisation of the world size is built
 * and each rank's coordinates are compared with rank = (r*S + s)*T + t. The NCCL backend on
 * ranks that cannot use it is refused by every rank alike, and so is an empty NCCL_HOSTID on one
 * rank.
 */
#include "sharding/mesh.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tests/testing_mpi.h"

typedef struct validate_case {
  int R, S, T, world;
  st_status want;
  const char *message_part; /* must appear in st_last_error() on failure */
  int resolved_S;           /* on success */
} validate_case;

static const validate_case cases[] = {
    {1, 0, 1, 8, ST_OK, NULL, 8},
    {2, 0, 2, 8, ST_OK, NULL, 2},
    {2, 2, 2, 8, ST_OK, NULL, 2},
    {1, 3, 1, 3, ST_OK, NULL, 3},
    {2, 3, 2, 8, ST_ERR_INVALID_ARG, "needs 12 ranks, world has 8", 0},
    {1, 0, 3, 8, ST_ERR_INVALID_ARG, "tp=3 = 3 does not divide the world of 8 ranks", 0},
    {0, 1, 1, 1, ST_ERR_INVALID_ARG, "every extent must be >= 1", 0},
    {1, -1, 1, 1, ST_ERR_INVALID_ARG, "every extent must be >= 1", 0},
    {1, 1, 0, 1, ST_ERR_INVALID_ARG, "every extent must be >= 1", 0},
};

/* nccl_max_ctas: 0 takes the default, 1..32 stay, anything else is refused naming the range. */
static void test_validate_nccl_max_ctas(void) {
  const int given[] = {0, 1, 32, -1, 33}, want[] = {ST_NCCL_MAX_CTAS_DEFAULT, 1, 32, 0, 0};
  for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
    st_mesh_config cfg = ST_MESH_CONFIG_INIT, resolved;
    cfg.dp_shard = 1;
    cfg.nccl_max_ctas = given[i];
    const st_status got = mesh_validate(&cfg, 1, &resolved);
    if (want[i]) {
      CHECK_OK(got);
      if (got == ST_OK) CHECK_EQ_INT(resolved.nccl_max_ctas, want[i]);
    } else {
      CHECK_STATUS(got, ST_ERR_INVALID_ARG);
      CHECK_MSG(strstr(st_last_error(), "outside 1..32") != NULL, "message '%s'", st_last_error());
    }
  }
}

static void test_validate_table(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const validate_case *k = &cases[i];
    st_mesh_config cfg = ST_MESH_CONFIG_INIT, resolved;
    cfg.dp_replicate = k->R;
    cfg.dp_shard = k->S;
    cfg.tp = k->T;
    st_status got = mesh_validate(&cfg, k->world, &resolved);
    CHECK_MSG(got == k->want, "case %zu (%dx%dx%d on %d): %s", i, k->R, k->S, k->T, k->world,
              st_status_string(got));
    if (got == ST_OK && k->want == ST_OK) CHECK_EQ_INT(resolved.dp_shard, k->resolved_S);
    if (k->message_part) {
      CHECK_MSG(strstr(st_last_error(), k->message_part) != NULL, "case %zu: message '%s'", i,
                st_last_error());
    }
  }
}

/* Every rank asks for the same impossible mesh; all must fail, with no communication. */
static void test_impossible_mesh_on_every_rank(int world) {
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  cfg.dp_replicate = 2;
  cfg.dp_shard = 3;
  cfg.tp = 2;
  st_mesh *mesh = (st_mesh *)&cfg; /* must be reset to NULL on failure */
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);
  CHECK(mesh == NULL);
  char want[128];
  snprintf(want, sizeof want,
           "mesh dp_replicate=2 x dp_shard=3 x tp=2 needs 12 ranks, world has %d", world);
  CHECK_MSG(strcmp(st_last_error(), want) == 0, "message '%s'", st_last_error());

  cfg.dp_shard = 0;
  cfg.dp_replicate = 1;
  cfg.tp = world + 1;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);

  st_mesh_config bad_size = ST_MESH_CONFIG_INIT;
  bad_size.struct_size = 3;
  CHECK_STATUS(st_mesh_create(&mesh, &bad_size), ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "ST_MESH_CONFIG_INIT") != NULL);

  st_mesh_config bad_device = ST_MESH_CONFIG_INIT;
  bad_device.device = "tpu";
  CHECK_STATUS(st_mesh_create(&mesh, &bad_device), ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "'tpu'") != NULL);
}

static void test_bad_timeout_env(void) {
  setenv("ST_COMM_TIMEOUT", "soon", 1);
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  st_mesh *mesh = NULL;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "ST_COMM_TIMEOUT='soon'") != NULL);
  unsetenv("ST_COMM_TIMEOUT");
}

/* A configured timeout must be a finite positive number (NCCL's calls run under a deadline of
 * it): infinity, NaN and negatives are refused, naming the field. */
static void test_bad_timeout_config(void) {
  const double bad[] = {INFINITY, -INFINITY, NAN, -1.0};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    st_mesh_config cfg = ST_MESH_CONFIG_INIT;
    cfg.device = "cpu";
    cfg.comm_timeout_s = bad[i];
    st_mesh *mesh = NULL;
    CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);
    CHECK_MSG(strstr(st_last_error(), "comm_timeout_s") != NULL, "timeout %g: %s", bad[i],
              st_last_error());
    CHECK(mesh == NULL);
  }
}

/* NCCL on ranks that cannot use it (here: CPU devices, even with a distinct NCCL_HOSTID each):
 * every rank refuses with the same message naming rank 0, and auto quietly takes MPI. */
static void test_nccl_refused_on_every_rank(int me) {
  char host_id[32];
  snprintf(host_id, sizeof host_id, "rank-%d", me);
  setenv("NCCL_HOSTID", host_id, 1);
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  cfg.backend = ST_COMM_NCCL;
  st_mesh *mesh = NULL;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_UNSUPPORTED);
  CHECK(mesh == NULL);
  CHECK_MSG(strstr(st_last_error(), "NCCL cannot join the ranks: rank 0 ") != NULL,
            "rank %d: message '%s'", me, st_last_error());
  cfg.backend = ST_COMM_AUTO;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  if (mesh) CHECK(strcmp(st_mesh_backend_name(mesh), "mpi") == 0);
  st_mesh_destroy(mesh);
  unsetenv("NCCL_HOSTID");
}

/* An empty NCCL_HOSTID on the last rank, which NCCL would read as a host named "": refused
 * wherever NCCL may be chosen, the rank itself naming the variable and every other rank naming
 * that rank; ignored with the MPI backend, which never asks NCCL. */
static void test_empty_host_id(int world, int me) {
  const int culprit = world - 1;
  if (me == culprit) setenv("NCCL_HOSTID", "", 1);
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  st_mesh *mesh = NULL;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);
  CHECK(mesh == NULL);
  char want[96] = "NCCL_HOSTID is set but empty";
  if (me != culprit) snprintf(want, sizeof want, "abandoned: world rank %d failed", culprit);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "rank %d: message '%s'", me, st_last_error());
  cfg.backend = ST_COMM_MPI;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  st_mesh_destroy(mesh);
  unsetenv("NCCL_HOSTID");
}

static void test_every_factorisation(int world, int me) {
  for (int R = 1; R <= world; R++) {
    for (int T = 1; R * T <= world; T++) {
      if (world % (R * T)) continue;
      int S = world / (R * T);
      st_mesh_config cfg = ST_MESH_CONFIG_INIT;
      cfg.device = "cpu";
      cfg.dp_replicate = R;
      cfg.tp = T;
      st_mesh *mesh = NULL;
      CHECK_OK(st_mesh_create(&mesh, &cfg));
      if (!mesh) continue;
      st_mesh_coords c;
      CHECK_OK(st_mesh_get_coords(mesh, &c));
      CHECK_MSG(c.R == R && c.S == S && c.T == T && c.world_rank == me,
                "mesh %dx%dx%d reported %dx%dx%d rank %d", R, S, T, c.R, c.S, c.T, c.world_rank);
      CHECK_MSG((c.r * S + c.s) * T + c.t == me, "rank %d got coordinates (%d,%d,%d) in %dx%dx%d",
                me, c.r, c.s, c.t, R, S, T);
      int rank, size;
      CHECK_OK(st_mesh_group_rank(mesh, ST_GROUP_TP, &rank, &size));
      CHECK(rank == c.t && size == T);
      CHECK_OK(st_mesh_group_rank(mesh, ST_GROUP_SHARD, &rank, &size));
      CHECK(rank == c.s && size == S);
      CHECK_OK(st_mesh_group_rank(mesh, ST_GROUP_REPLICATE, &rank, &size));
      CHECK(rank == c.r && size == R);
      CHECK_OK(st_mesh_group_rank(mesh, ST_GROUP_DP, &rank, &size));
      CHECK(rank == c.r * S + c.s && size == R * S);
      CHECK(strcmp(st_mesh_backend_name(mesh), "mpi") == 0);
      CHECK(strcmp(st_mesh_device_name(mesh), "cpu") == 0);
      st_mesh_destroy(mesh);
    }
  }
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  int world = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  test_validate_table();
  test_validate_nccl_max_ctas();
  test_impossible_mesh_on_every_rank(world);
  test_bad_timeout_env();
  test_bad_timeout_config();
  test_nccl_refused_on_every_rank(me);
  test_empty_host_id(world, me);
  test_every_factorisation(world, me);
  st_mesh_destroy(NULL);
  mem_stats stats;
  mem_stats_get(&stats);
  CHECK_EQ_INT(stats.live_blocks, 0);
  int rc = test_finish_mpi("mesh_test");
  st_finalize();
  return rc;
}
