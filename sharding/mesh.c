/* mesh.c - validating and building the process mesh. Validation is a pure function of the
 * config and the world size; its verdict, and the resolved mesh compared with world rank 0's,
 * are shared in one agreement, so a mesh one rank refuses or asks differently fails every rank
 * alike; device choices, which can differ between nodes, are agreed on with one
 * all-reduce so that either every rank proceeds or every rank fails. Every rank's node, device
 * and NCCL_HOSTID are then gathered, and the same pure checks on every rank (nccl_place.h)
 * refuse a job that `auto` put partly on the CPU, choose the backend, and find tensor-parallel
 * groups that span nodes, which world rank 0 warns about once the groups are built. */
#include "sharding/mesh.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check_mpi.h"
#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/mpi_agree.h"
#include "sharding/comm_mpi.h"
#include "sharding/comm_nccl.h"
#include "sharding/nccl_place.h"

/* Meshes, and units on a mesh, not yet destroyed: they hold MPI objects, so st_finalize refuses
 * while any is live (runtime.c). Only the thread that called st_init uses the API (FUNNELED). */
static int mesh_live;

struct st_mesh {
  int counted;   /* in mesh_live: built whole by st_mesh_create */
  int holders;   /* units that use it (mesh_hold) */
  int destroyed; /* st_mesh_destroy was called while units held it: the last frees it */
  st_mesh_coords coords;
  st_device device;
  st_comm_backend backend;
  comm *groups[ST_GROUP_COUNT];
  MPI_Comm control; /* mesh_control */
  /* The fewest ranks of one tp group on one node, a rank with that few and its node's name,
   * from the gathered reports (nccl_place_tp_node_share). */
  int tp_node_share, tp_share_rank;
  char tp_share_node[NCCL_PLACE_NODE_NAME_SIZE];
};

const char *mesh_group_name(st_group group) {
  static const char *const names[ST_GROUP_COUNT] = {"world", "tp", "shard", "replicate", "dp"};
  return (unsigned)group < ST_GROUP_COUNT ? names[group] : "invalid";
}

st_status mesh_validate(const st_mesh_config *config, int world_size, st_mesh_config *resolved) {
  int R = config->dp_replicate, S = config->dp_shard, T = config->tp;
  if (R < 1 || T < 1 || S < 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "mesh dp_replicate=%d x dp_shard=%d x tp=%d: every extent must be >= 1 "
                    "(dp_shard 0 means world / (dp_replicate x tp))",
                    R, S, T);
  }
  if (S == 0) {
    int64_t rt = (int64_t)R * T;
    if (rt > world_size || world_size % rt != 0) {
      return st_error(ST_ERR_INVALID_ARG,
                      "mesh dp_replicate=%d x tp=%d = %lld does not divide the world of %d rank%s",
                      R, T, (long long)rt, world_size, world_size == 1 ? "" : "s");
    }
    S = (int)(world_size / rt);
  }
  int64_t ranks = 0;
  if (__builtin_mul_overflow((int64_t)R * S, (int64_t)T, &ranks)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "mesh dp_replicate=%d x dp_shard=%d x tp=%d needs more ranks than the world "
                    "has (%d)",
                    R, S, T, world_size);
  }
  if (ranks != world_size) {
    return st_error(ST_ERR_INVALID_ARG,
                    "mesh dp_replicate=%d x dp_shard=%d x tp=%d needs %lld rank%s, world has %d", R,
                    S, T, (long long)ranks, ranks == 1 ? "" : "s", world_size);
  }
  const int ctas = config->nccl_max_ctas;
  if (ctas < 0 || ctas > ST_NCCL_MAX_CTAS_LIMIT) {
    return st_error(ST_ERR_INVALID_ARG, "nccl_max_ctas %d is outside 1..%d (0: the default %d)",
                    ctas, ST_NCCL_MAX_CTAS_LIMIT, ST_NCCL_MAX_CTAS_DEFAULT);
  }
  *resolved = *config;
  resolved->dp_shard = S;
  resolved->nccl_max_ctas = ctas ? ctas : ST_NCCL_MAX_CTAS_DEFAULT;
  return ST_OK;
}

void mesh_coords_of(const st_mesh_config *mesh, int rank, int *r, int *s, int *t) {
  int S = mesh->dp_shard, T = mesh->tp;
  *t = rank % T;
  *s = (rank / T) % S;
  *r = rank / (T * S);
}

/* Copies a caller's config that may come from an older, smaller version of the struct. */
static st_status read_config(const st_mesh_config *config, st_mesh_config *out) {
  const st_mesh_config defaults = ST_MESH_CONFIG_INIT;
  return config_read(out, &defaults, sizeof *out, config,
                     offsetof(st_mesh_config, tp) + sizeof(int), "st_mesh_config");
}

/* The collectives' timeout: the config's, else $ST_COMM_TIMEOUT's (300 s unset). Finite, as the
 * deadlines of NCCL's set-up and enqueues need (core/deadline.h). */
static st_status resolve_timeout(const st_mesh_config *cfg, double *timeout_s) {
  if (cfg->comm_timeout_s != 0) {
    if (!isfinite(cfg->comm_timeout_s) || cfg->comm_timeout_s < 0) {
      return st_error(ST_ERR_INVALID_ARG,
                      "st_mesh_config.comm_timeout_s %g is not a positive number of seconds "
                      "(0: $ST_COMM_TIMEOUT)",
                      cfg->comm_timeout_s);
    }
    *timeout_s = cfg->comm_timeout_s;
    return ST_OK;
  }
  int ok = 0;
  *timeout_s = env_get_positive(ENV_COMM_TIMEOUT, &ok);
  if (!ok) {
    return st_error(ST_ERR_INVALID_ARG, "ST_COMM_TIMEOUT='%s' is not a positive number of seconds",
                    env_get_string(ENV_COMM_TIMEOUT));
  }
  return ST_OK;
}

/* NCCL takes an empty NCCL_HOSTID for a host named "" (it tests only whether the variable is
 * set), so nccl_place, which reads empty as unset, would predict another verdict than NCCL's:
 * refused wherever NCCL will be asked to join the ranks. */
static st_status check_host_id(void) {
  if (!env_is_set_empty(ENV_NCCL_HOSTID)) return ST_OK;
  return st_error(ST_ERR_INVALID_ARG,
                  "NCCL_HOSTID is set but empty: unset it, or give each rank that shares a GPU "
                  "a distinct non-empty value (docs/ENVIRONMENT.md)");
}

/* This rank's report for nccl_place: its node (the processor name and the kernel's boot id,
 * as NCCL names a host), its GPU's bus id, its NCCL_HOSTID, whether `auto` chose its device. */
static st_status report_place(const st_device *dev, int device_auto, nccl_place_rank *out) {
  char node[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(node, &len));
  char boot_id[NCCL_PLACE_BOOT_ID_SIZE];
  int has_boot_id = nccl_place_read_boot_id(NCCL_PLACE_BOOT_ID_PATH, boot_id, sizeof boot_id);
  const char *test_node = env_lookup(ENV_TEST_NODE);
  if (test_node) {
    snprintf(node, sizeof node, "%s", test_node);
    has_boot_id = 0;
  }
  char bus[DEVICE_BUS_ID_SIZE];
  ST_CHECK(device_bus_id(dev, bus));
  const nccl_place_parts parts = {.node = node,
                                  .boot_id = has_boot_id ? boot_id : NULL,
                                  .bus_id = bus[0] ? bus : NULL,
                                  .host_id = env_lookup(ENV_NCCL_HOSTID),
                                  .has_nccl = comm_nccl_available(),
                                  .device_auto = device_auto};
  nccl_place_rank_make(out, &parts);
  return ST_OK;
}

/* Every rank's report and the scratch of the check, taken before the ranks agree that they
 * are ready, so that nothing after the agreement can fail on one rank alone. */
typedef struct place_table {
  nccl_place_rank me, *all;
  nccl_place_name *scratch;
} place_table;

static st_status place_table_prepare(place_table *t, const st_device *dev, int device_auto,
                                     int world) {
  ST_CHECK(report_place(dev, device_auto, &t->me));
  ST_CHECK(
      mem_alloc((void **)&t->all, (size_t)world * sizeof *t->all, MEM_HOST, MEM_WORKSPACE, NULL));
  return mem_alloc((void **)&t->scratch, (size_t)world * sizeof *t->scratch, MEM_HOST,
                   MEM_WORKSPACE, NULL);
}

/* The device mix, the backend and the tp groups' nodes, from the gathered reports: every rank
 * gathers the same table and so reaches the same verdict. A job that `auto` put on the CPU on
 * some ranks and on a GPU on others is refused. NCCL where it can join the ranks: a GPU per
 * rank, or ranks sharing a GPU with a distinct NCCL_HOSTID each, which nobody sets by accident,
 * so `auto` follows it too (the GPU tests run the real NCCL path this way on one GPU). `auto`
 * falls back to MPI otherwise, which world rank 0 explains when every rank has a GPU; `nccl`
 * refuses, naming the ranks at fault. */
static st_status choose_backend(st_mesh *mesh, const st_mesh_config *cfg, place_table *t) {
  const int world = mesh->coords.world_size;
  MPI_CHECK(
      MPI_Allgather(&t->me, sizeof t->me, MPI_BYTE, t->all, sizeof t->me, MPI_BYTE, mesh->control));
  ST_CHECK(nccl_place_check_devices(t->all, world));
  nccl_place_choice choice;
  ST_CHECK(nccl_place_choose(t->all, world, cfg->backend, t->scratch, &choice));
  if (mesh->coords.world_rank == 0 && choice.shares_gpu) {
    st_log(ST_LOG_WARN,
           "ranks share a GPU: NCCL joins them through its socket transport (one NCCL_HOSTID "
           "each), which is correct but slow");
  }
  if (mesh->coords.world_rank == 0 && choice.split_a >= 0) {
    st_log(ST_LOG_WARN,
           "ranks %d and %d compute on different GPUs of node %s, but their NCCL_HOSTIDs make NCCL "
           "take them for two hosts: it joins them through its network transport, not NVLink or "
           "shared memory (NCCL_HOSTID is for ranks that share a GPU)",
           choice.split_a, choice.split_b, t->all[choice.split_a].node_name);
  }
  if (mesh->coords.world_rank == 0 && choice.gpu_fallback) {
    st_log(ST_LOG_WARN,
           "collective backend auto: MPI, not NCCL, although every rank computes on a GPU: %s",
           choice.reason);
  }
  mesh->backend = choice.backend;
  mesh->tp_node_share =
      nccl_place_tp_node_share(t->all, world, mesh->coords.T, &mesh->tp_share_rank);
  if (mesh->tp_share_rank >= 0) {
    snprintf(mesh->tp_share_node, sizeof mesh->tp_share_node, "%s",
             t->all[mesh->tp_share_rank].node_name);
  }
  return ST_OK;
}

/* Ends the preparation of every rank at once: a rank that failed (`mine`) keeps its own
 * error, the others name the rank that failed; then the backend is chosen. */
static st_status agree_and_choose(st_mesh *mesh, const st_mesh_config *cfg, const char *request,
                                  st_status mine, place_table *t) {
  char step[128];
  snprintf(step, sizeof step, "set-up of device '%s'", request);
  ST_CHECK(mpi_agree_naming(mesh->control, mine, step));
  return choose_backend(mesh, cfg, t);
}

/* Chooses this rank's device and the job's backend. Every rank calls it; a failure on one rank
 * fails all of them with the same status. */
static st_status choose_device_and_backend(st_mesh *mesh, const st_mesh_config *cfg) {
  MPI_Comm node;
  int local_rank = 0;
  MPI_CHECK(MPI_Comm_split_type(mesh->control, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);

  const char *request = cfg->device ? cfg->device : env_get_string(ENV_DEVICE);
  place_table t = {0};
  st_status mine = device_select(request, local_rank, &mesh->device);
  /* NCCL_HOSTID matters only where NCCL may join the ranks: on a GPU. */
  if (mine == ST_OK && cfg->backend != ST_COMM_MPI && mesh->device.backend->kind != ST_DEVICE_CPU) {
    mine = check_host_id();
  }
  if (mine == ST_OK) {
    mine = place_table_prepare(&t, &mesh->device, strcmp(request, "auto") == 0,
                               mesh->coords.world_size);
  }
  const st_status status = agree_and_choose(mesh, cfg, request, mine, &t);
  mem_free(t.scratch);
  mem_free(t.all);
  return status;
}

/* MPI_Comm_split colour and key of this rank in each group. Keys order ranks inside a group:
 * the dp group is ordered by d = r * S + s, the data-parallel index of DESIGN.md. */
static void group_color_key(const st_mesh_coords *c, st_group group, int *color, int *key) {
  switch (group) {
    case ST_GROUP_TP:
      *color = c->r * c->S + c->s;
      *key = c->t;
      break;
    case ST_GROUP_SHARD:
      *color = c->r * c->T + c->t;
      *key = c->s;
      break;
    case ST_GROUP_REPLICATE:
      *color = c->s * c->T + c->t;
      *key = c->r;
      break;
    case ST_GROUP_DP:
      *color = c->t;
      *key = c->r * c->S + c->s;
      break;
    default:
      *color = 0;
      *key = c->world_rank;
      break;
  }
}

static st_status create_groups(st_mesh *mesh, double timeout_s, int nccl_max_ctas) {
  for (int g = 0; g < ST_GROUP_COUNT; g++) {
    int color, key;
    group_color_key(&mesh->coords, (st_group)g, &color, &key);
    MPI_Comm split;
    MPI_CHECK(MPI_Comm_split(mesh->control, color, key, &split));
    st_status status = mesh->backend == ST_COMM_NCCL
                           ? comm_nccl_create(&mesh->groups[g], split, mesh_group_name(g),
                                              &mesh->device, timeout_s, nccl_max_ctas)
                           : comm_mpi_create(&mesh->groups[g], split, mesh_group_name(g),
                                             &mesh->device, timeout_s);
    MPI_Comm_free(&split);
    ST_CHECK(status);
  }
  return ST_OK;
}

/* The mesh puts a tp group on consecutive world ranks, as launchers place ranks in blocks by
 * default; a launch that deals them out round-robin (mpirun --map-by node, srun -m cyclic), or
 * nodes that hold a number of ranks tp does not divide, put a group on several nodes, where its
 * all-reduces, one or more per layer, cross the network. Legal, so a warning, once. */
static void warn_tp_across_nodes(const st_mesh *mesh) {
  const int T = mesh->coords.T;
  if (mesh->coords.world_rank != 0 || mesh->tp_node_share >= T) return;
  st_log(ST_LOG_WARN,
         "tensor-parallel groups span nodes (tp=%d): as few as %d of a group's %d ranks share a "
         "node (world rank %d on %s), so tp's all-reduces cross the network; the mesh puts a tp "
         "group on %d consecutive world ranks: launch ranks in blocks (mpirun --map-by slot, "
         "srun -m block) with a multiple of %d on each node",
         T, mesh->tp_node_share, T, mesh->tp_share_rank, mesh->tp_share_node, T, T);
}

/* What every rank's groups are built from: a mesh the ranks disagree on would split the world
 * into groups that do not match, and each rank would wait in collectives the others never
 * make. */
typedef struct mesh_shape {
  int dp_replicate, dp_shard, tp, backend, nccl_max_ctas;
} mesh_shape;

static mesh_shape shape_of(const st_mesh_config *resolved) {
  return (mesh_shape){resolved->dp_replicate, resolved->dp_shard, resolved->tp,
                      (int)resolved->backend, resolved->nccl_max_ctas};
}

static const char *backend_request_name(int backend) {
  static const char *const names[] = {"auto", "mpi", "nccl"};
  return (unsigned)backend < sizeof names / sizeof *names ? names[backend] : "invalid";
}

/* A config that one rank refuses (`mine`), or that resolves to another mesh than world rank 0's,
 * fails every rank with the lowest such rank's reason. */
static st_status agree_on_config(MPI_Comm control, st_status mine, const st_mesh_config *resolved,
                                 int world_rank) {
  ST_CHECK(mpi_agree_share(control, mine));
  const mesh_shape here = shape_of(resolved);
  mesh_shape first = here;
  MPI_CHECK(MPI_Bcast(&first, (int)sizeof first, MPI_BYTE, 0, control));
  if (memcmp(&first, &here, sizeof here) != 0) {
    mine =
        st_error(ST_ERR_INVALID_ARG,
                 "st_mesh_create: the ranks ask for different meshes (every rank must pass "
                 "the same config): dp_replicate=%d x dp_shard=%d x tp=%d, backend %s, "
                 "nccl_max_ctas %d on world rank 0; %d x %d x %d, %s, %d on world rank %d",
                 first.dp_replicate, first.dp_shard, first.tp, backend_request_name(first.backend),
                 first.nccl_max_ctas, here.dp_replicate, here.dp_shard, here.tp,
                 backend_request_name(here.backend), here.nccl_max_ctas, world_rank);
  }
  return mpi_agree_share(control, mine);
}

/* The mesh's own duplicate of the world, on which errors come back as codes: its set-up and
 * checks never meet the program's collectives on MPI_COMM_WORLD, nor change its error handler. */
static st_status control_create(MPI_Comm *out) {
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, out));
  /* A failure here is this rank's alone: the caller agrees on it over the duplicate. */
  if (MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
    return st_error(ST_ERR_MPI, "st_mesh_create: MPI_Comm_set_errhandler failed");
  }
  return ST_OK;
}

static void control_free(MPI_Comm *control) {
  /* After MPI_Finalize the duplicate is MPI's to drop (comm_mpi_finalized). */
  if (*control != MPI_COMM_NULL && !comm_mpi_finalized()) MPI_Comm_free(control);
}

st_status st_mesh_create(st_mesh **out, const st_mesh_config *config) {
  if (out) *out = NULL;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return st_error(ST_ERR_INVALID_ARG, "st_mesh_create needs st_init first");
  if (comm_mpi_finalized()) {
    return st_error(ST_ERR_INVALID_ARG,
                    "st_mesh_create: MPI is finalized (st_finalize, or the program's "
                    "MPI_Finalize)");
  }
  int world_rank, world_size;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  /* Collective from here: a rank's own refusal is every rank's. */
  MPI_Comm control = MPI_COMM_NULL;
  st_status mine = control_create(&control);
  if (control == MPI_COMM_NULL) return mine; /* the duplicate failed: nothing to agree over */
  st_mesh_config cfg, resolved = {0};
  double timeout_s = 0;
  st_mesh *mesh = NULL; /* allocated before the agreement, which then covers it */
  if (mine == ST_OK && !out) mine = st_error(ST_ERR_INVALID_ARG, "st_mesh_create: out is NULL");
  if (mine == ST_OK) mine = read_config(config, &cfg);
  if (mine == ST_OK) mine = mesh_validate(&cfg, world_size, &resolved);
  if (mine == ST_OK) mine = resolve_timeout(&resolved, &timeout_s);
  if (mine == ST_OK) {
    mine = mem_alloc_zeroed((void **)&mesh, sizeof *mesh, MEM_HOST, MEM_WORKSPACE, NULL);
  }
  st_status status = agree_on_config(control, mine, &resolved, world_rank);
  if (status != ST_OK) {
    mem_free(mesh);
    control_free(&control);
    return status;
  }
  mesh->control = control;
  st_mesh_coords *c = &mesh->coords;
  c->world_rank = world_rank;
  c->world_size = world_size;
  c->R = resolved.dp_replicate;
  c->S = resolved.dp_shard;
  c->T = resolved.tp;
  mesh_coords_of(&resolved, world_rank, &c->r, &c->s, &c->t);
  st_log_set_rank(world_rank);

  ST_CHECK_GOTO(choose_device_and_backend(mesh, &resolved), status, fail);
  ST_CHECK_GOTO(create_groups(mesh, timeout_s, resolved.nccl_max_ctas), status, fail);
  /* A wait for the device's work may wait for a collective (core/device.h). */
  device_bound_waits(timeout_s);
  warn_tp_across_nodes(mesh);
  *out = mesh;
  mesh->counted = 1;
  mesh_live++;
  return ST_OK;
fail:
  st_mesh_destroy(mesh);
  return status;
}

static void mesh_free(st_mesh *mesh) {
  for (int g = ST_GROUP_COUNT - 1; g >= 0; g--) comm_destroy(mesh->groups[g]);
  control_free(&mesh->control);
  if (mesh->counted) mesh_live--;
  mem_free(mesh);
}

void st_mesh_destroy(st_mesh *mesh) {
  if (!mesh) return;
  if (mesh->holders > 0) {
    mesh->destroyed = 1;
    return;
  }
  mesh_free(mesh);
}

/* The count is bookkeeping of the handle, not of the mesh the const promises the unit's calls
 * leave alone. */
void mesh_hold(const st_mesh *mesh) {
  ((st_mesh *)mesh)->holders++;
  mesh_live++;
}

void mesh_unhold(const st_mesh *mesh) {
  st_mesh *m = (st_mesh *)mesh;
  mesh_live--;
  if (--m->holders == 0 && m->destroyed) mesh_free(m);
}

int mesh_live_handles(void) { return mesh_live; }

st_status st_mesh_get_coords(const st_mesh *mesh, st_mesh_coords *out) {
  if (!mesh || !out) {
    return st_error(ST_ERR_INVALID_ARG, "st_mesh_get_coords: %s is NULL", mesh ? "out" : "mesh");
  }
  *out = mesh->coords;
  return ST_OK;
}

st_status st_mesh_group_rank(const st_mesh *mesh, st_group group, int *rank, int *size) {
  if (!mesh || !rank || !size) {
    return st_error(ST_ERR_INVALID_ARG, "st_mesh_group_rank: %s is NULL",
                    !mesh   ? "mesh"
                    : !rank ? "rank"
                            : "size");
  }
  if ((unsigned)group >= ST_GROUP_COUNT) {
    return st_error(ST_ERR_INVALID_ARG, "st_mesh_group_rank: group %d does not exist", (int)group);
  }
  *rank = comm_rank(mesh->groups[group]);
  *size = comm_size(mesh->groups[group]);
  return ST_OK;
}

/* The name calls return a string, not a status: a NULL mesh gets a fixed one (shardtrain.h). */
#define MESH_NULL_NAME "(null mesh)"

const char *st_mesh_backend_name(const st_mesh *mesh) {
  if (!mesh) return MESH_NULL_NAME;
  return mesh->backend == ST_COMM_NCCL ? "nccl" : "mpi";
}

const char *st_mesh_device_name(const st_mesh *mesh) {
  return mesh ? mesh->device.backend->name : MESH_NULL_NAME;
}

comm *mesh_comm(const st_mesh *mesh, st_group group) { return mesh->groups[group]; }

MPI_Comm mesh_control(const st_mesh *mesh) { return mesh->control; }

comm *mesh_swap_comm(st_mesh *mesh, st_group group, comm *replacement) {
  comm *old = mesh->groups[group];
  mesh->groups[group] = replacement;
  return old;
}

const st_device *mesh_device(const st_mesh *mesh) { return &mesh->device; }
