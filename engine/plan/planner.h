/* planner.h - each rank's peak memory by category for a GPT training run, predicted from the
 * config, the mesh, the ZeRO stage and the batch alone, before anything is allocated. The
 * allocator tracks the same categories, so prediction and measurement can be printed side by
 * side (and are tested against each other).
 *
 * What is predicted (Psi_u = unit u's padded flat length; params in the param dtype, grads in
 * the reduce dtype, optimizer states in fp32, activations in gpt_activation_dtype: fp32 on the
 * CPU):
 *   params, grads, optimizer: the stage's resident buffers (sharding/unit.h's table);
 *   gathered: what the buffer pool holds, for each size the most full-unit buffers of that
 *     size alive at once, found by walking the engine's schedule (forward gathers with
 *     prefetch, releases, the backward's re-gathers, its gradient lifetimes and, where the
 *     kernels lack the dtype, the compute copies);
 *   activations: the forward activations kept for the backward (the attention state as the
 *     device's kernels size it: kernel_kind_attention_state_numel), less what activation
 *     recompute shares between the layers (engine/model/gpt_recompute.h);
 *   workspace: the backward's gradient buffers, the micro-batches' tokens, the step's device
 *     scalars, the kernel backend's fixed workspace (kernel_kind_workspace_bytes: on CUDA
 *     cuBLASLt's scratch, the ops' regions and their host staging) and the largest transient
 *     of a step (the attention backward's scratch: kernel_kind_attention_scratch_bytes) or,
 *     when the run checkpoints, between steps, of a save (its host staging:
 *     PLAN_CKPT_STAGING_BYTES), whichever is larger; saving in the background, instead of that
 *     staging, the host snapshot of the owned master, m and v, allocated at start-up on the
 *     first replica's ranks, which write the files (engine/checkpoint/ckpt_writer.h); and the
 *     model's tables (gpt_table_bytes, each unit's unit_layout_table_bytes: about 4.5 KiB a
 *     layer, as much as the workspace of a model 16 wide);
 *   comm: collective staging buffers (none on the CPU);
 *   optimizer_host: with the optimizer offloaded, the master, m and v instead of `optimizer`,
 *     plus, where the device has its own memory, the pinned staging of the largest unit's
 *     owned gradients and parameters during its update (sharding/unit.h).
 * Not predicted: bookkeeping of a few kilobytes (the mesh's communicators, the buffer pool's
 * table, the loaders: about 2 KiB and 0.3 KiB a layer), a save's manifest and file header
 * (PLAN_CKPT_STAGING_BYTES below) and the one-off scratch of initialisation, import, a resumed
 * checkpoint's restore and export, which precede or follow the steps. */
#ifndef ST_ENGINE_PLAN_PLANNER_H
#define ST_ENGINE_PLAN_PLANNER_H

#include <stdint.h>

#include "core/alloc.h"
#include "engine/model/gpt_config.h"
#include "engine/model/gpt_recompute.h"
#include "sharding/unit.h"

/* The most ranks (GPUs) a plan, a simulation or a fit describes: the commands refuse more up
 * front, so products of mesh sizes stay far from INT_MAX (docs/CLI.md). */
enum { PLAN_MAX_RANKS = 1 << 20 };

/* The host buffer through which a checkpoint save copies each rank's master, m and v from the
 * device to its file, a chunk at a time (category workspace, alive only during the save, which
 * runs between steps): CKPT_CHUNK_ELEMENTS floats (engine/checkpoint/ckpt_source.h, a layer
 * above; checkpoint.c asserts that the two agree). Not counted: the save's bookkeeping alive
 * beside it (the manifest, the file's layout and header: about 2 KiB per parameter tensor, 58
 * KiB for tiny, 310 KiB for d12, a small fraction of the states they describe), and the buffers
 * it takes once the staging is freed (the checksum's 64 KiB chunk, rank 0's table of the files,
 * 88 bytes a rank), smaller than the staging below about 12000 ranks. */
#define PLAN_CKPT_STAGING_BYTES ((int64_t)1 << 20)

typedef struct plan_input {
  gpt_config cfg; /* finished (gpt_config_finish) */
  int R, S, T;    /* mesh */
  int stage;
  int micro_batch, seq_len, grad_accum;
  int prefetch;
  int reshard_after_forward;
  unit_precision precision; /* param and reduce dtypes ({0}: fp32) */
  st_device_kind device;    /* whose kernels size the attention state ({0}: the CPU) */
  int compute_copies;       /* the kernels lack the param dtype (the CPU): see unit.h */
  int offload_optimizer;    /* master, m, v in host memory (--offload optimizer) */
  int device_is_host;       /* device memory is host RAM (the CPU): offload stages nothing */
  gpt_recompute recompute;  /* activations recomputed in the backward ({0}: none) */
  int checkpoints;          /* the run saves checkpoints (--ckpt-dir): a save's host staging */
  int checkpoints_async;    /* ... in the background (--ckpt-async): the states' snapshot */
} plan_input;

/* Where the bytes live: host_bytes is what is allocated in host memory whatever the device
 * (the offloaded optimizer state and its staging, the micro-batches' tokens, the kernel
 * backend's host staging, a checkpoint save's staging or snapshot, and the model's tables),
 * device_bytes everything else. On the CPU both are the same RAM, and a budget must count their
 * sum; on a GPU device_bytes is what its memory must hold. total = device_bytes + host_bytes is the
 * sum of the categories' peaks. */
typedef struct memory_plan {
  uint64_t bytes[MEM_CATEGORY_COUNT]; /* peak per category on any rank */
  uint64_t model_states;              /* params + grads + optimizer (+ optimizer_host) */
  uint64_t total, device_bytes, host_bytes;
  int64_t psi; /* parameters per rank after the TP split (unpadded) */
} memory_plan;

st_status plan_memory(const plan_input *in, memory_plan *out);

/* plan_input.compute_copies for a device of `kind`: 1 when its kernels do not compute in the
 * param or the reduce dtype (kernel_kind_computes_in), so its units keep fp32 compute copies of
 * those buffers in use (sharding/unit.h): the CPU with bf16 or fp16. */
int plan_compute_copies(st_device_kind kind, unit_precision precision);

/* Bytes one rank sends per step for the parameters and gradients (all-gather + reduce-scatter
 * on the shard group, all-reduce on the replicate group) and for the activations (all-reduce
 * on the tp group: two in the forward and two in the backward of every block, B x T x C each,
 * and with block recompute one more in the recomputed forward of every block but the last), in
 * the counters' ring accounting. */
typedef struct comm_plan {
  uint64_t shard_all_gather, shard_reduce_scatter, replicate_all_reduce, tp_all_reduce;
} comm_plan;

st_status plan_comm(const plan_input *in, comm_plan *out);

#endif /* ST_ENGINE_PLAN_PLANNER_H */
