/* mesh_test.c - mesh validation and construction, checked on every rank.
 *
 * Validation is table-driven against the world size (pure, no communication): impossible
 * meshes are refused with messages that name the numbers. Then st_mesh_create is called with
 * impossible meshes on every rank at once: each rank must return ST_ERR_INVALID_ARG with the
 * same message and nobody may hang, also when only one rank's config (or environment) differs
 * from the others' or is refused. Finally every factorisation of the world size is built
 * and each rank's coordinates are compared with rank = (r*S + s)*T + t. The NCCL backend on
 * ranks that cannot use it is refused by every rank alike, and so is an empty NCCL_HOSTID on one
 * rank. A job on one machine's CPUs, tp spanning the world, is built without a warning: its tp
 * group sits on one node, and a job on the CPU expects MPI (the decisions that warn are proved
 * on tables in nccl_place_test).
 */
#include "sharding/mesh.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    /* extents whose product wraps to 1 in 64 bits */
    {1229673, 3935371, 7623851, 1, ST_ERR_INVALID_ARG, "needs more ranks than the world has (1)",
     0},
};

/* A count of 1 is "1 rank": the whole message is compared, as "1 rank" is also part of
 * "1 ranks". */
static void test_validate_singular(void) {
  st_mesh_config cfg = ST_MESH_CONFIG_INIT, resolved;
  cfg.dp_shard = 1;
  CHECK_STATUS(mesh_validate(&cfg, 2, &resolved), ST_ERR_INVALID_ARG);
  CHECK_MSG(strcmp(st_last_error(),
                   "mesh dp_replicate=1 x dp_shard=1 x tp=1 needs 1 rank, world has 2") == 0,
            "message '%s'", st_last_error());
  cfg.dp_shard = 0;
  cfg.dp_replicate = 2;
  CHECK_STATUS(mesh_validate(&cfg, 1, &resolved), ST_ERR_INVALID_ARG);
  CHECK_MSG(strcmp(st_last_error(),
                   "mesh dp_replicate=2 x tp=1 = 2 does not divide the world of 1 rank") == 0,
            "message '%s'", st_last_error());
}

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

/* One rank's config alone: a mesh unlike world rank 0's, a mesh only it refuses, a bad
 * ST_COMM_TIMEOUT only it has, a NULL out only it passes. Every rank must fail with the same
 * message (the lowest failing rank's), none building groups the others do not build. */
static void test_one_rank_differs(int world, int me) {
  if (world < 2) return;
  const int odd = world - 1; /* the rank that differs */
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  if (me == odd) cfg.dp_replicate = world; /* valid alone: dp_shard 0 resolves to 1 */
  st_mesh *mesh = (st_mesh *)&cfg;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);
  CHECK(mesh == NULL);
  char want[256];
  snprintf(want, sizeof want,
           "dp_replicate=1 x dp_shard=%d x tp=1, backend auto, nccl_max_ctas %d on world rank 0; "
           "%d x 1 x 1, auto, %d on world rank %d",
           world, ST_NCCL_MAX_CTAS_DEFAULT, world, ST_NCCL_MAX_CTAS_DEFAULT, odd);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "rank %d: '%s'", me, st_last_error());

  cfg.dp_replicate = 1;
  cfg.backend = me == odd ? ST_COMM_MPI : ST_COMM_AUTO;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "backend auto") && strstr(st_last_error(), "mpi, "),
            "rank %d: '%s'", me, st_last_error());

  cfg.backend = ST_COMM_AUTO;
  if (me == odd) cfg.tp = world + 1;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);
  snprintf(want, sizeof want, "tp=%d = %d does not divide the world of %d ranks", world + 1,
           world + 1, world);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "rank %d: '%s'", me, st_last_error());

  cfg.tp = 1;
  if (me == odd) setenv("ST_COMM_TIMEOUT", "soon", 1);
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "ST_COMM_TIMEOUT='soon'") != NULL, "rank %d: '%s'", me,
            st_last_error());
  unsetenv("ST_COMM_TIMEOUT");

  CHECK_STATUS(st_mesh_create(me == odd ? NULL : &mesh, &cfg), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "st_mesh_create: out is NULL") != NULL, "rank %d: '%s'", me,
            st_last_error());
  CHECK(mesh == NULL);
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
 * every rank refuses with the same message, which says that every rank is at fault (rank 0 on
 * one rank), and auto quietly takes MPI. */
static void test_nccl_refused_on_every_rank(int world, int me) {
  char host_id[32];
  snprintf(host_id, sizeof host_id, "rank-%d", me);
  setenv("NCCL_HOSTID", host_id, 1);
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  cfg.backend = ST_COMM_NCCL;
  st_mesh *mesh = NULL;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_UNSUPPORTED);
  CHECK(mesh == NULL);
  char want[64] = "NCCL cannot join the ranks: rank 0 ";
  if (world > 1) {
    snprintf(want, sizeof want, "NCCL cannot join the ranks: every rank (all %d) ", world);
  }
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "rank %d: message '%s', want '%s'", me,
            st_last_error(), want);
  cfg.backend = ST_COMM_AUTO;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  if (mesh) CHECK(strcmp(st_mesh_backend_name(mesh), "mpi") == 0);
  st_mesh_destroy(mesh);
  unsetenv("NCCL_HOSTID");
}

/* An empty NCCL_HOSTID on the last rank, which NCCL would read as a host named "", matters only
 * where NCCL may join the ranks, on a GPU (refused there: collectives_test, --device cuda): a
 * CPU mesh is built with MPI, and NCCL asked for on the CPU is refused for the CPU, not for the
 * variable. */
static void test_empty_host_id_on_cpu(int world, int me) {
  if (me == world - 1) setenv("NCCL_HOSTID", "", 1);
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  if (mesh) CHECK(strcmp(st_mesh_backend_name(mesh), "mpi") == 0);
  st_mesh_destroy(mesh);
  mesh = NULL;
  cfg.backend = ST_COMM_NCCL;
  CHECK_STATUS(st_mesh_create(&mesh, &cfg), ST_ERR_UNSUPPORTED);
  /* "... computes on the CPU, not a GPU", or "... has no NCCL" in a build without it */
  CHECK_MSG(strstr(st_last_error(), "NCCL cannot join the ranks") != NULL &&
                strstr(st_last_error(), "NCCL_HOSTID") == NULL,
            "rank %d: message '%s'", me, st_last_error());
  CHECK(mesh == NULL);
  unsetenv("NCCL_HOSTID");
}

/* Runs st_mesh_create with this rank's stderr in `captured`. */
static st_status create_capturing(st_mesh **mesh, const st_mesh_config *cfg, char *captured,
                                  size_t cap) {
  captured[0] = '\0';
  FILE *tmp = tmpfile();
  if (!CHECK(tmp != NULL)) return st_mesh_create(mesh, cfg);
  fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fileno(tmp), STDERR_FILENO);
  const st_status s = st_mesh_create(mesh, cfg);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  rewind(tmp);
  const size_t n = fread(captured, 1, cap - 1, tmp);
  captured[n] = '\0';
  fclose(tmp);
  return s;
}

/* Every rank of this test shares one machine: a tp group of the whole world sits on one node,
 * and `auto` on the CPU takes MPI, so no rank warns. */
static void test_one_node_is_silent(int world, int me) {
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  cfg.tp = world;
  st_mesh *mesh = NULL;
  char captured[4096];
  CHECK_OK(create_capturing(&mesh, &cfg, captured, sizeof captured));
  CHECK_MSG(strstr(captured, "warn") == NULL, "rank %d warned: '%s'", me, captured);
  if (mesh) CHECK(strcmp(st_mesh_backend_name(mesh), "mpi") == 0);
  st_mesh_destroy(mesh);
}

/* Ranks standing for two nodes (ST_TEST_NODE): dealt out round-robin, each tp group of 2 spans
 * both, and world rank 0 alone warns, naming the placement flags; in blocks, none warns. */
static void test_tp_across_nodes(int world, int me) {
  if (world % 2) return;
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  cfg.tp = 2;
  char node[32], captured[4096];
  snprintf(node, sizeof node, "node-%d", me % 2);
  setenv("ST_TEST_NODE", node, 1);
  st_mesh *mesh = NULL;
  CHECK_OK(create_capturing(&mesh, &cfg, captured, sizeof captured));
  const int warned = strstr(captured,
                            "tensor-parallel groups span nodes (tp=2): as few as 1 of a group's 2 "
                            "ranks share a node") != NULL &&
                     strstr(captured, "mpirun --map-by slot, srun -m block") != NULL;
  CHECK_MSG(warned == (me == 0), "rank %d, round-robin: '%s'", me, captured);
  st_mesh_destroy(mesh);
  snprintf(node, sizeof node, "node-%d", me / 2);
  setenv("ST_TEST_NODE", node, 1);
  mesh = NULL;
  CHECK_OK(create_capturing(&mesh, &cfg, captured, sizeof captured));
  CHECK_MSG(strstr(captured, "warn") == NULL, "rank %d, in blocks: '%s'", me, captured);
  st_mesh_destroy(mesh);
  unsetenv("ST_TEST_NODE");
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

/* The n-th allocation of st_unit_reduce_grads fails on every rank, for every n until none
 * does, at every stage: the error is ST_ERR_OOM, and the collective it started is complete
 * when it returns, so destroying the unit and then communicating is safe and nothing leaks.
 * (Before the fix, the reduce-scatter stayed in flight: MPI wrote into the freed unit.) */
static void test_reduce_allocation_failures(int world) {
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  if (!mesh) return;
  static const int64_t shape[1] = {40};
  float w[40] = {0};
  for (int stage = 0; stage <= 3; stage++) {
    int failures = 0;
    for (long n = 1; n <= 50; n++) {
      mem_stats before, after;
      mem_stats_get(&before);
      st_unit_config uc = ST_UNIT_CONFIG_INIT;
      uc.zero_stage = stage;
      st_unit *u = NULL;
      float *g = NULL;
      CHECK_OK(st_unit_create(&u, mesh, "u", &uc));
      CHECK_OK(st_unit_add_param(u, "w", 1, shape, ST_TP_REPLICATED, NULL));
      CHECK_OK(st_unit_finalize(u));
      CHECK_OK(st_unit_set_param(u, 0, w));
      CHECK_OK(st_unit_zero_grads(u));
      CHECK_OK(st_unit_begin_backward(u));
      CHECK_OK(st_unit_grad_data(u, 0, &g));
      if (g) g[0] = 1;
      mem_fail_nth(n);
      const st_status s = st_unit_reduce_grads(u);
      mem_fail_nth(0);
      st_unit_destroy(u);
      MPI_Barrier(MPI_COMM_WORLD);
      mem_stats_get(&after);
      CHECK_MSG(after.live_blocks == before.live_blocks,
                "stage %d, allocation %ld of the reduce failed: %lld blocks live, %lld before",
                stage, n, (long long)after.live_blocks, (long long)before.live_blocks);
      if (s == ST_OK) break;
      failures++;
      CHECK_MSG(s == ST_ERR_OOM, "stage %d, allocation %ld failed as %s", stage, n,
                st_status_string(s));
    }
    /* On several ranks the reduce allocates (its timing events): a failure was injected. */
    if (world > 1) CHECK_MSG(failures > 0, "stage %d: the reduce allocated nothing", stage);
  }
  st_mesh_destroy(mesh);
}

/* NULL handles and outputs are refused, naming the call; the name calls say so in words. */
static void test_null_arguments(void) {
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  st_mesh_coords c;
  int rank = 0, size = 0;
  CHECK_STATUS(st_mesh_create(NULL, &cfg), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "st_mesh_create") != NULL, "'%s'", st_last_error());
  CHECK_STATUS(st_mesh_get_coords(NULL, &c), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "st_mesh_get_coords") != NULL, "'%s'", st_last_error());
  CHECK_STATUS(st_mesh_group_rank(NULL, ST_GROUP_WORLD, &rank, &size), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "st_mesh_group_rank") != NULL, "'%s'", st_last_error());
  CHECK(strcmp(st_mesh_backend_name(NULL), "(null mesh)") == 0);
  CHECK(strcmp(st_mesh_device_name(NULL), "(null mesh)") == 0);
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  if (!mesh) return;
  CHECK_STATUS(st_mesh_get_coords(mesh, NULL), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "st_mesh_get_coords") != NULL, "'%s'", st_last_error());
  CHECK_STATUS(st_mesh_group_rank(mesh, ST_GROUP_WORLD, NULL, &size), ST_ERR_INVALID_ARG);
  CHECK_STATUS(st_mesh_group_rank(mesh, ST_GROUP_WORLD, &rank, NULL), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "st_mesh_group_rank") != NULL, "'%s'", st_last_error());
  st_mesh_destroy(mesh);
}

/* st_finalize refuses while a mesh or a unit on one is live: destroying them needs MPI. */
static void test_finalize_with_live_handles(void) {
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  st_mesh *mesh = NULL;
  st_unit *u = NULL;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  CHECK_STATUS(st_finalize(), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "st_finalize: 1 meshes") != NULL, "'%s'", st_last_error());
  CHECK_OK(st_unit_create(&u, mesh, "u", NULL));
  st_mesh_destroy(mesh);
  CHECK_STATUS(st_finalize(), ST_ERR_INVALID_ARG);
  st_unit_destroy(u);
}

/* After st_finalize, st_init and st_mesh_create are refused instead of aborting in MPI. */
static int calls_after_finalize_refused(void) {
  int argc = 0;
  char **argv = NULL;
  st_mesh *mesh = (st_mesh *)&mesh;
  const st_status init = st_init(&argc, &argv);
  const st_status create = st_mesh_create(&mesh, NULL);
  if (init != ST_ERR_INVALID_ARG || create != ST_ERR_INVALID_ARG || mesh != NULL) {
    fprintf(stderr, "FAIL: after st_finalize: st_init %s, st_mesh_create %s ('%s')\n",
            st_status_string(init), st_status_string(create), st_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  int world = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  test_validate_table();
  test_validate_singular();
  test_validate_nccl_max_ctas();
  test_impossible_mesh_on_every_rank(world);
  test_one_rank_differs(world, me);
  test_bad_timeout_env();
  test_bad_timeout_config();
  test_nccl_refused_on_every_rank(world, me);
  test_empty_host_id_on_cpu(world, me);
  test_one_node_is_silent(world, me);
  test_tp_across_nodes(world, me);
  test_every_factorisation(world, me);
  test_reduce_allocation_failures(world);
  test_null_arguments();
  test_finalize_with_live_handles();
  st_mesh_destroy(NULL);
  mem_stats stats;
  mem_stats_get(&stats);
  CHECK_EQ_INT(stats.live_blocks, 0);
  int rc = test_finish_mpi("mesh_test");
  if (st_finalize() != ST_OK) rc = 1;
  if (calls_after_finalize_refused()) rc = 1;
  return rc;
}
