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
  ST_ERR_TIMEOUT = 10,    /* reserved, never returned: a collective past comm_timeout_s reports
                           * which one and ends the whole job (exit code 3), since its peers
                           * cannot be recovered (docs/API.md) */
  ST_ERR_INTERNAL = 11    /* a broken invariant: a bug in shardtrain */
} st_status;

/* Element types of parameters and gradients (a unit's mixed-precision policy). */
typedef enum st_dtype { ST_FP32 = 0, ST_BF16 = 1, ST_FP16 = 2 } st_dtype;

/* Name of a status ("ST_ERR_OOM"); never NULL. */
const char *st_status_string(st_status status);

/* This thread's description of its last failure ("" if none). Valid until the next failing
 * call on the same thread. */
const char *st_last_error(void);

/* "0.1.0" */
const char *st_version(void);

/* ---- Process runtime ------------------------------------------------------------------------
 * st_init starts MPI (thread level FUNNELED) unless the caller already did; st_finalize shuts
 * down only what st_init started. Every other call that communicates needs st_init first.
 * MPI starts once per process: st_init and st_mesh_create after st_finalize (or the caller's
 * MPI_Finalize) return ST_ERR_INVALID_ARG. st_finalize returns ST_ERR_INVALID_ARG, finalizing
 * nothing, while a mesh or a unit created on a mesh is not yet destroyed: destroy them first.
 * A program that calls MPI_Finalize itself may do so with meshes and units live: afterwards
 * st_unit_create on a mesh and every call on a unit on a mesh but st_unit_destroy return
 * ST_ERR_INVALID_ARG, st_unit_destroy and st_mesh_destroy free only memory (no MPI call), and
 * st_finalize returns ST_OK. */
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
  double comm_timeout_s;   /* seconds, finite > 0; 0: $ST_COMM_TIMEOUT, else 300 s */
  const char *device;      /* "cpu", "cuda" or "auto"; NULL: $ST_DEVICE, else auto */
  int nccl_max_ctas;       /* NCCL: thread blocks (SMs) one collective may take, 1 to
                              ST_NCCL_MAX_CTAS_LIMIT; 0: ST_NCCL_MAX_CTAS_DEFAULT */
} st_mesh_config;

/* The most thread blocks a collective may take here (NCCL's own ceiling is higher: 64 channels in
 * NCCL 2.28), and the mesh's default: half of it, so that collectives overlapping compute leave
 * the compute most of the SMs. */
#define ST_NCCL_MAX_CTAS_LIMIT 32
#define ST_NCCL_MAX_CTAS_DEFAULT 16

#define ST_MESH_CONFIG_INIT \
  { sizeof(st_mesh_config), 1, 0, 1, ST_COMM_AUTO, 0.0, NULL, 0 }

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

/* Frees the mesh; where units created on it are not yet destroyed, the last of them frees it
 * (they go on working until then). NULL is allowed. */
void st_mesh_destroy(st_mesh *mesh);

typedef struct st_mesh_coords {
  int world_rank, world_size;
  int r, s, t; /* this rank's coordinates */
  int R, S, T; /* the mesh's extents */
} st_mesh_coords;

st_status st_mesh_get_coords(const st_mesh *mesh, st_mesh_coords *out);

/* Rank and size of this process inside a group. */
st_status st_mesh_group_rank(const st_mesh *mesh, st_group group, int *rank, int *size);

/* "mpi" or "nccl": the collective backend the mesh chose; "(null mesh)" for NULL. */
const char *st_mesh_backend_name(const st_mesh *mesh);

/* "cpu" or "cuda": the device the mesh chose for this rank; "(null mesh)" for NULL. */
const char *st_mesh_device_name(const st_mesh *mesh);

/* ---- Memory ---------------------------------------------------------------------------------
 * Bytes this process holds through the library's allocator (every category, host and device):
 * 0 again once every handle is destroyed, so callers and tests can check for leaks. */
st_status st_memory_live_bytes(uint64_t *bytes);

/* ---- Parameter units (FSDP units) -----------------------------------------------------------
 * A unit is a group of parameters gathered, released and reduced together: one layer or block
 * of the caller's own model, computed by the caller's own code. Its buffers live on the mesh's
 * device (st_mesh_device_name; the CPU without a mesh). Parameters are held in the config's
 * param dtype and gradients in its reduce dtype (fp32, bf16 or fp16), with fp32 master weights
 * and Adam moments; the caller computes in the dtype the device's kernels compute in (the _typed
 * data calls say which), fp32 where they lack the unit's (on the CPU, a bf16 or fp16 unit in use
 * keeps fp32 copies). fp16 needs loss scaling, which is the caller's: scale the loss gradient by
 * S, skip the step (and lower S) when st_unit_grad_sumsq's sum is not finite, and pass 1 / S in
 * st_unit_adamw_step's grad_scale. A program's calls:
 *
 *   st_unit_create; st_unit_add_param for each parameter; st_unit_finalize;
 *   st_unit_set_param for each parameter; st_unit_optimizer_reset; then every step:
 *     st_unit_zero_grads
 *     forward:  st_unit_gather, read st_unit_param_data, st_unit_release
 *     backward: st_unit_gather, st_unit_begin_backward, add into st_unit_grad_data,
 *               st_unit_release, st_unit_reduce_grads
 *     st_unit_grad_sumsq (summed by the caller over the shard group), st_unit_adamw_step
 *
 * The ZeRO stage decides which buffers stay resident and which are sharded (docs/SHARDING.md,
 * "ZeRO stages"); the results are the same at every stage. The order above is enforced at every
 * stage, stage 0 and a NULL mesh included (a call out of order returns ST_ERR_INVALID_ARG and says
 * which call was missing), so a program that runs on one rank runs sharded unchanged. Every rank of
 * the mesh makes the same unit calls in the same order, because they communicate over the shard and
 * replicate groups. The reduction sums each gradient over the data-parallel ranks: to train on the
 * mean over a global batch, scale the loss gradient by 1 / (global batch). */
typedef struct st_unit st_unit;

/* How a parameter is split over the tp group: replicated whole, by its last dimension (column:
 * output features) or by its first dimension (row: input features). */
typedef enum st_tp_split { ST_TP_REPLICATED = 0, ST_TP_COLUMN = 1, ST_TP_ROW = 2 } st_tp_split;

typedef struct st_unit_config {
  size_t struct_size;    /* sizeof(st_unit_config), filled by ST_UNIT_CONFIG_INIT */
  int zero_stage;        /* 0 (replicated, DDP) to 3 (full shard); 0 without a mesh */
  st_dtype param_dtype;  /* ST_FP32, ST_BF16 or ST_FP16: parameters as held, gathered, used */
  st_dtype reduce_dtype; /* ST_FP32, ST_BF16 or ST_FP16: gradients as accumulated and reduced */
} st_unit_config;

#define ST_UNIT_CONFIG_INIT \
  { sizeof(st_unit_config), 0, ST_FP32, ST_FP32 }

/* The longest unit name st_unit_create takes, in bytes (without the terminating zero): the
 * unit keeps a copy, and a longer name is refused with ST_ERR_INVALID_ARG, not cut short. */
#define ST_UNIT_NAME_MAX 63

/* mesh may be NULL (one rank, stage 0, CPU); otherwise the unit keeps it until destroyed, even
 * past st_mesh_destroy. name: at most ST_UNIT_NAME_MAX bytes. config may be NULL (the
 * defaults). */
st_status st_unit_create(st_unit **out, const st_mesh *mesh, const char *name,
                         const st_unit_config *config);
void st_unit_destroy(st_unit *unit);

/* The longest parameter name st_unit_add_param takes, in bytes (without the terminating zero);
 * a longer name is refused with ST_ERR_INVALID_ARG, not cut short. */
#define ST_PARAM_NAME_MAX 95

/* Declares the next parameter, before st_unit_finalize: its name (at most ST_PARAM_NAME_MAX
 * bytes, distinct within the unit), its logical (full) shape, 1 to 4 dimensions, and its tp
 * split. *index (may be NULL) receives its position, from 0. A
 * parameter, and the unit's parameters together, hold at most INT64_MAX / 8 elements; larger
 * (or overflowing) shapes are refused with ST_ERR_INVALID_ARG naming the parameter. */
st_status st_unit_add_param(st_unit *unit, const char *name, int ndim, const int64_t *shape,
                            st_tp_split split, int *index);

/* Lays the parameters out and allocates the unit's buffers (zero-filled; released). On a mesh,
 * collective: every rank must have declared the same unit (name, stage, dtypes, and each
 * parameter's name, shape and split), or every rank gets ST_ERR_INVALID_ARG naming the first
 * rank that differs from world rank 0 and what differs, and nothing is allocated; an
 * allocation that fails on one rank fails every rank (only st_unit_destroy remains). */
st_status st_unit_finalize(st_unit *unit);

/* Elements of this rank's tp slice of parameter `index` (the whole parameter when tp = 1). */
st_status st_unit_param_numel(const st_unit *unit, int index, int64_t *numel);

/* Sets parameter `index` from host memory: st_unit_param_numel elements, this rank's tp slice
 * in row-major order. Call st_unit_optimizer_reset afterwards, before the next step. */
st_status st_unit_set_param(st_unit *unit, int index, const float *values);

/* Makes the full (tp-local) parameters available, waiting for the all-gather at stage 3. */
st_status st_unit_gather(st_unit *unit);
/* Ends their use: stage 3 frees them; pointers from st_unit_param_data become invalid. */
st_status st_unit_release(st_unit *unit);

/* Parameter `index` in the full buffer (the unit's device memory), valid between gather and
 * release, in the dtype the device computes with: the param dtype where its kernels compute in
 * it (a GPU with bf16), else fp32 (on the CPU, a bf16 unit's compute copy); *dtype says which. */
st_status st_unit_param_data_typed(st_unit *unit, int index, void **data, st_dtype *dtype);
/* The same for a caller that computes in fp32 only: ST_ERR_UNSUPPORTED where the data is not
 * fp32. */
st_status st_unit_param_data(st_unit *unit, int index, float **data);

/* Starts a step: the gradients are zero. */
st_status st_unit_zero_grads(st_unit *unit);
/* Makes the full gradients exist (stages 2-3 allocate them for the backward); the caller adds
 * its gradients into them through st_unit_grad_data, over as many micro-batches as it likes. */
st_status st_unit_begin_backward(st_unit *unit);
/* Gradient of parameter `index` (the unit's device memory), valid between begin_backward and
 * reduce, in the dtype the device computes with: the reduce dtype where its kernels compute in
 * it, else fp32 (for a bf16 unit on the CPU its compute copy, rounded into the bf16 gradients
 * at the reduce); *dtype says which. */
st_status st_unit_grad_data_typed(st_unit *unit, int index, void **data, st_dtype *dtype);
/* The same for a caller that computes in fp32 only: ST_ERR_UNSUPPORTED where the data is not
 * fp32. */
st_status st_unit_grad_data(st_unit *unit, int index, float **data);
/* Sums the gradients over the data-parallel ranks; each rank then holds its owned part
 * (stages 2-3 free the full gradients). */
st_status st_unit_reduce_grads(st_unit *unit);

/* After the reduce: the sum of squares of this rank's shard of the unit's gradients. The
 * caller sums it over the units and over the shard group (ST_GROUP_SHARD, e.g. with
 * MPI_Allreduce), and with tp > 1 over the tp group too: the squared global gradient norm.
 * Parameters replicated across tp are left out on tp ranks other than 0, so each is counted
 * once. Accumulated in fp32 on the unit's device (the engine's global norm is too), so it
 * carries fp32 rounding. */
st_status st_unit_grad_sumsq(st_unit *unit, double *local);

/* Zeroes Adam's moments; an fp32 unit also copies its current parameters into the fp32 master
 * weights (a bf16 unit's master keeps the exact values st_unit_set_param gave). */
st_status st_unit_optimizer_reset(st_unit *unit);

typedef struct st_adamw_config {
  size_t struct_size; /* sizeof(st_adamw_config), filled by ST_ADAMW_CONFIG_INIT */
  float beta1;        /* 0.9 */
  float beta2;        /* 0.95 */
  float eps;          /* 1e-8 */
  float weight_decay; /* 0.1 (as `shardtrain train`), decoupled, on parameters of rank >= 2 */
} st_adamw_config;

#define ST_ADAMW_CONFIG_INIT \
  { sizeof(st_adamw_config), 0.9f, 0.95f, 1e-8f, 0.1f }

/* One AdamW step (PyTorch's torch.optim.AdamW) on this rank's owned part of the unit, then the
 * updated parameters published to every rank that holds them; needs the unit released and its
 * gradients reduced. step counts from 1 (the bias corrections); the gradients are multiplied
 * by grad_scale first (a clipping coefficient, or 1). config may be NULL (the defaults). lr
 * must be finite and >= 0 (0: a warm-up step) and grad_scale finite and > 0, or
 * ST_ERR_INVALID_ARG. */
st_status st_unit_adamw_step(st_unit *unit, const st_adamw_config *config, int step, float lr,
                             float grad_scale);

/* Checkpointing a unit. Its optimizer state, the fp32 master weights and Adam's moments, is
 * kept by the ranks that own it: of each parameter, a contiguous part of the rank's tp slice,
 * possibly empty, per rank of the shard group (the whole slice at stage 0). A program saves every
 * rank's owned parts (st_unit_read_state) in files of its own, with the step count it passes to
 * st_unit_adamw_step; to resume on the same mesh, stage and parameters, it writes them back
 * (st_unit_write_state on each parameter), then publishes them (st_unit_publish_state), and
 * the training that follows is bit-identical to one that never stopped. */
typedef enum st_optimizer_state {
  ST_STATE_MASTER = 0, /* the fp32 master weights */
  ST_STATE_ADAM_M = 1, /* Adam's first moment */
  ST_STATE_ADAM_V = 2  /* Adam's second moment */
} st_optimizer_state;

/* The part of parameter `index`'s tp slice (row-major) whose optimizer state this rank owns:
 * elements [*first, *first + *count); *count 0 where it owns none of it (*first then still in
 * [0, the slice's elements]). */
st_status st_unit_owned_range(const st_unit *unit, int index, int64_t *first, int64_t *count);

/* Copies state `state` of this rank's owned part of parameter `index` (*count floats of
 * st_unit_owned_range) into host memory `out` (NULL allowed when *count is 0). Needs the
 * optimizer state ready, as st_unit_adamw_step does. No communication. */
st_status st_unit_read_state(st_unit *unit, int index, st_optimizer_state state, float *out);

/* Sets this rank's owned part of parameter `index` from host memory: its master weights and
 * Adam's m and v, *count floats each (NULL allowed when *count is 0). Needs the unit released
 * and no gradients of a step in progress (a new unit, or st_unit_zero_grads since the last
 * reduce). Until st_unit_publish_state the unit is neither gathered nor stepped, nor its
 * parameters set or its optimizer reset. No communication. */
st_status st_unit_write_state(st_unit *unit, int index, const float *master, const float *adam_m,
                              const float *adam_v);

/* After st_unit_write_state: every rank's parameters become the masters rounded to the param
 * dtype (all-gathered where the stage keeps full parameters), and the unit takes AdamW steps
 * again. Collective over the shard group: every rank of it calls it, a rank that owns none of
 * the parameters (st_unit_owned_range's counts all 0) whether or not it wrote them; when a rank
 * that owns some has neither written nor reset its state, every rank of the group refuses. */
st_status st_unit_publish_state(st_unit *unit);

#ifdef __cplusplus
}
#endif

#endif /* SHARDTRAIN_H */
