/* shardtrain.h - the one public C99 header of libshardtrain.
 *
 * Every call returns an st_status (ST_OK = 0); st_status_string() names a status and
 * st_last_error() returns this thread's detail for the last failure. Handles are opaque and
 * created/destroyed in pairs; destroy accepts NULL. Configuration structs start with a size
 * field and have an initializer macro, so they can grow without breaking callers.
 */
#ifndef SHARDTRAIN_H
#define SHARDTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ST_VERSION_MAJOR 0
#define ST_VERSION_MINOR 1
#define ST_VERSION_PATCH 0

typedef enum st_status {
  ST_OK = 0,
  ST_ERR_INVALID_ARG = 1, /* a bad value from the caller (names the value in st_last_error) */
  ST_ERR_OOM = 2,         /* an allocation failed (host, pinned or device) */
  ST_ERR_IO = 3,          /* a file could not be read or written */
  ST_ERR_FORMAT = 4,      /* a file was read but its contents are malformed */
  ST_ERR_UNSUPPORTED = 5, /* valid request this build or device cannot do */
  ST_ERR_NO_DEVICE = 6,   /* a GPU was asked for and none is usable */
  ST_ERR_CUDA = 7,        /* the CUDA runtime or cuBLAS failed */
  ST_ERR_NCCL = 8,        /* NCCL failed */
  ST_ERR_MPI = 9,         /* MPI failed */
  ST_ERR_TIMEOUT = 10,    /* a collective did not finish within the timeout */
  ST_ERR_INTERNAL = 11    /* a broken invariant: a bug in shardtrain */
} st_status;

/* Name of a status ("ST_ERR_OOM"); never NULL. */
const char *st_status_string(st_status status);

/* This thread's description of its last failure ("" if none). Valid until the next failing
 * call on the same thread. */
const char *st_last_error(void);

/* "0.1.0" */
const char *st_version(void);

/* ---- Process runtime ------------------------------------------------------------------------
 * st_init starts MPI (thread level FUNNELED) unless the caller already did; st_finalize shuts
 * down only what st_init started. Every other call that communicates needs st_init first. */
st_status st_init(int *argc, char ***argv);
st_status st_finalize(void);

/* ---- Process mesh ---------------------------------------------------------------------------
 * world = dp_replicate x dp_shard x tp ranks; rank = (r * S + s) * T + t (tp innermost). */
typedef struct st_mesh st_mesh;

typedef enum st_comm_backend {
  ST_COMM_AUTO = 0, /* NCCL when every rank has its own usable GPU, else MPI */
  ST_COMM_MPI = 1,
  ST_COMM_NCCL = 2
} st_comm_backend;

typedef struct st_mesh_config {
  size_t struct_size;      /* sizeof(st_mesh_config), filled by ST_MESH_CONFIG_INIT */
  int dp_replicate;        /* R >= 1 */
  int dp_shard;            /* S >= 1, or 0: world / (R * T) */
  int tp;                  /* T >= 1 */
  st_comm_backend backend; /* collective backend for every group */
  double comm_timeout_s;   /* 0: $ST_COMM_TIMEOUT, else 300 s */
  const char *device;      /* "cpu", "cuda" or "auto"; NULL: $ST_DEVICE, else auto */
} st_mesh_config;

#define ST_MESH_CONFIG_INIT {sizeof(st_mesh_config), 1, 0, 1, ST_COMM_AUTO, 0.0, NULL}

typedef enum st_group {
  ST_GROUP_WORLD = 0,
  ST_GROUP_TP = 1,        /* same (r, s) */
  ST_GROUP_SHARD = 2,     /* same (r, t) */
  ST_GROUP_REPLICATE = 3, /* same (s, t) */
  ST_GROUP_DP = 4,        /* same t: shard x replicate */
  ST_GROUP_COUNT = 5
} st_group;

/* Validates the mesh against the world size on every rank (an impossible mesh fails the same
 * way everywhere, before any communication) and creates the groups' communicators. */
st_status st_mesh_create(st_mesh **out, const st_mesh_config *config);
void st_mesh_destroy(st_mesh *mesh);

typedef struct st_mesh_coords {
  int world_rank, world_size;
  int r, s, t;      /* this rank's coordinates */
  int R, S, T;      /* the mesh's extents */
} st_mesh_coords;

st_status st_mesh_get_coords(const st_mesh *mesh, st_mesh_coords *out);

/* Rank and size of this process inside a group. */
st_status st_mesh_group_rank(const st_mesh *mesh, st_group group, int *rank, int *size);

/* "mpi" or "nccl": the collective backend the mesh chose. */
const char *st_mesh_backend_name(const st_mesh *mesh);

/* "cpu" or "cuda": the device the mesh chose for this rank. */
const char *st_mesh_device_name(const st_mesh *mesh);

/* ---- Memory ---------------------------------------------------------------------------------
 * Bytes this process holds through the library's allocator (every category, host and device):
 * 0 again once every handle is destroyed, so callers and tests can check for leaks. */
st_status st_memory_live_bytes(uint64_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* SHARDTRAIN_H */
