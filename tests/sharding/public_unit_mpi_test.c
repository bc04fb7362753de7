/* public_unit_mpi_test.c - the public unit calls on a real mesh of 4 ranks, checked on every
 * rank:
 * - st_unit_publish_state where some ranks own none of the unit (a parameter of 10 elements: the
 *   unit is cut into equal padded shards, so the last ranks' are all padding). As the header
 *   promises, such a rank publishes without having written anything: on a new unit, whose state
 *   was never reset, the ranks that own something write their parts, the others only publish;
 *   at stages 1-3 every rank then holds the written masters as its parameters and takes an
 *   AdamW step. (Refused on the empty ranks, the collectives of the writers went unmatched.)
 *   The same call on every rank before any state is written is refused on every rank, the empty
 *   ones too (which went on into the gather alone, and waited there for the others), and
 *   allocates nothing to agree: an allocation failing there on rank 2 alone left the other
 *   ranks in the shard group's all-reduce.
 * - a unit destroyed after its mesh: st_mesh_destroy leaves the mesh to the unit, which still
 *   gathers, reduces and steps, then frees it (under the sanitizers a freed mesh is caught).
 * - st_unit_finalize where one rank (world rank 2) declares another unit than the others: another
 *   parameter count, shape, split, parameter name, unit name, ZeRO stage or dtype. Every rank is
 *   refused, with rank 2's words naming what differs (the collectives paired buffers of other
 *   layouts: wrong values with no error, or an MPI error naming no cause). And where only rank
 *   2's allocation fails, every rank fails (rank 2 with its own error, naming the unit), and
 *   nothing stays allocated.
 * `--device cuda` runs it on GPUs (the units' buffers, and the publish's agreement, in device
 * memory; the parameters read back through a stream) and prints SKIP without one. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
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
  CHECK_MSG(first >= 0 && count >= 0 && first + count <= N, "stage %d rank %d: owns [%lld, +%lld)",
            stage, rank, (long long)first, (long long)count); /* inside the parameter, even empty */
  float master[N], zero[N] = {0};
  for (int i = 0; i < N; i++) master[i] = 0.5f * (float)(i + 1);
  int owners = count > 0;
  MPI_Allreduce(MPI_IN_PLACE, &owners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char refusal[64];
  snprintf(refusal, sizeof refusal, "no optimizer state on %d of the 4 ranks", owners);
  /* The refusal allocates nothing of its own, on no rank (on a GPU, the MPI backend stages
   * each collective through pinned memory it allocates then: the collective's, not the call's). */
  if (rank == 2 && strcmp(device, "cpu") == 0) mem_fail_nth(1);
  CHECK_MSG(st_unit_publish_state(u) == ST_ERR_INVALID_ARG && strstr(st_last_error(), refusal),
            "stage %d rank %d: publish before any write: %s", stage, rank, st_last_error());
  mem_fail_nth(0);
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

enum { ODD_RANK = 2 }; /* the rank that declares differently */

/* A declaration that world rank ODD_RANK makes differently (`odd`), and a part of the words
 * that must say so. */
typedef struct declaration_case {
  const char *difference;
  void (*declare)(st_unit_config *config, const char **unit_name, const char **param_name,
                  int64_t *shape, st_tp_split *split, int *extra, int odd);
} declaration_case;

static void other_count(st_unit_config *c, const char **u, const char **p, int64_t *shape,
                        st_tp_split *split, int *extra, int odd) {
  (void)c, (void)u, (void)p, (void)shape, (void)split;
  *extra = odd;
}
static void other_shape(st_unit_config *c, const char **u, const char **p, int64_t *shape,
                        st_tp_split *split, int *extra, int odd) {
  (void)c, (void)u, (void)p, (void)split, (void)extra;
  if (odd) shape[0] = 16; /* the same padded size on 4 ranks: the gather gave wrong values */
}
static void other_split(st_unit_config *c, const char **u, const char **p, int64_t *shape,
                        st_tp_split *split, int *extra, int odd) {
  (void)c, (void)u, (void)p, (void)shape, (void)extra;
  if (odd) *split = ST_TP_COLUMN;
}
static void other_param_name(st_unit_config *c, const char **u, const char **p, int64_t *shape,
                             st_tp_split *split, int *extra, int odd) {
  (void)c, (void)u, (void)shape, (void)split, (void)extra;
  if (odd) *p = "c";
}
static void other_unit_name(st_unit_config *c, const char **u, const char **p, int64_t *shape,
                            st_tp_split *split, int *extra, int odd) {
  (void)c, (void)p, (void)shape, (void)split, (void)extra;
  if (odd) *u = "other";
}
static void other_stage(st_unit_config *c, const char **u, const char **p, int64_t *shape,
                        st_tp_split *split, int *extra, int odd) {
  (void)u, (void)p, (void)shape, (void)split, (void)extra;
  if (odd) c->zero_stage = 2;
}
static void other_dtype(st_unit_config *c, const char **u, const char **p, int64_t *shape,
                        st_tp_split *split, int *extra, int odd) {
  (void)u, (void)p, (void)shape, (void)split, (void)extra;
  if (odd) c->param_dtype = ST_BF16;
}

static const declaration_case declaration_cases[] = {
    {"1 parameter there, 2 here", other_count},
    {"parameter 0 is 'b' [10] replicated there, 'b' [16] replicated here", other_shape},
    {"parameter 0 is 'b' [10] replicated there, 'b' [10] column here", other_split},
    {"parameter 0 is 'b' [10] replicated there, 'c' [10] replicated here", other_param_name},
    {"the unit is 'bias' there, 'other' here", other_unit_name},
    {"ZeRO stage 3 there, 2 here", other_stage},
    {"param and reduce dtypes fp32 and fp32 there, bf16 and fp32 here", other_dtype},
};

static void declarations_must_match(const st_mesh *mesh, int rank) {
  for (size_t k = 0; k < sizeof declaration_cases / sizeof *declaration_cases; k++) {
    const declaration_case *dc = &declaration_cases[k];
    st_unit_config config = ST_UNIT_CONFIG_INIT;
    config.zero_stage = 3;
    const char *unit_name = "bias", *param_name = "b";
    int64_t shape[1] = {N};
    st_tp_split split = ST_TP_REPLICATED;
    int extra = 0;
    dc->declare(&config, &unit_name, &param_name, shape, &split, &extra, rank == ODD_RANK);
    st_unit *u = NULL;
    CHECK_OK(st_unit_create(&u, mesh, unit_name, &config));
    if (!u) continue;
    CHECK_OK(st_unit_add_param(u, param_name, 1, shape, split, NULL));
    if (extra) CHECK_OK(st_unit_add_param(u, "extra", 1, kShape, ST_TP_REPLICATED, NULL));
    const st_status status = st_unit_finalize(u);
    char want[160];
    snprintf(want, sizeof want, "declared differently on world rank 0 (there) and world rank %d",
             ODD_RANK);
    CHECK_MSG(status == ST_ERR_INVALID_ARG && strstr(st_last_error(), want) &&
                  strstr(st_last_error(), dc->difference),
              "case %zu, rank %d: %s: '%s'", k, rank, st_status_string(status), st_last_error());
    st_unit_destroy(u);
  }
}

/* Only world rank ODD_RANK's last allocation of st_unit_finalize fails (the number of its
 * allocations counted on a unit alike first). */
static void one_rank_out_of_memory(const st_mesh *mesh, int rank) {
  mem_stats before, counted;
  mem_stats_get(&before);
  st_unit_config config = ST_UNIT_CONFIG_INIT;
  config.zero_stage = 3;
  st_unit *twin = NULL, *u = NULL;
  CHECK_OK(st_unit_create(&twin, mesh, "twin", &config));
  CHECK_OK(st_unit_add_param(twin, "b", 1, kShape, ST_TP_REPLICATED, NULL));
  mem_stats_get(&counted);
  CHECK_OK(st_unit_finalize(twin));
  mem_stats live;
  mem_stats_get(&live);
  const long allocations = (long)(live.live_blocks - counted.live_blocks);
  st_unit_destroy(twin);

  CHECK_OK(st_unit_create(&u, mesh, "u", &config));
  CHECK_OK(st_unit_add_param(u, "b", 1, kShape, ST_TP_REPLICATED, NULL));
  if (rank == ODD_RANK) mem_fail_nth(allocations);
  const st_status status = st_unit_finalize(u);
  mem_fail_nth(0);
  char want[96];
  if (rank == ODD_RANK) {
    snprintf(want, sizeof want, "st_unit_finalize: unit 'u': injected allocation failure");
  } else {
    snprintf(want, sizeof want, "st_unit_finalize of unit 'u' abandoned: world rank %d failed",
             ODD_RANK);
  }
  CHECK_MSG(status == ST_ERR_OOM && strstr(st_last_error(), want), "rank %d: %s: '%s'", rank,
            st_status_string(status), st_last_error());
  CHECK_STATUS(st_unit_gather(u), ST_ERR_INVALID_ARG); /* only destroy is left */
  st_unit_destroy(u);
  mem_stats after;
  mem_stats_get(&after);
  CHECK_EQ_INT(after.live_blocks, before.live_blocks);
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
    declarations_must_match(mesh, rank);
    one_rank_out_of_memory(mesh, rank);
  }
  st_mesh_destroy(mesh);
  unit_outlives_mesh();
  const int failed = test_finish_mpi("public_unit_mpi_test");
  /* After the count, which needs MPI; refused while a mesh or unit lives (the last unit freed its
   * mesh), MPI is left running and mpirun fails the run. */
  CHECK_OK(st_finalize());
  return failed;
}
