/* planner.c - memory and communication predictions (see planner.h). Unit sizes come from the
 * model's own declarations (gpt_declare_unit over unit_layout); the schedule walk below is an
 * independent description of the engine's order of gathers, releases and reductions. */
#include "engine/plan/planner.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/model/gpt.h"
#include "kernels/kernels.h"
#include "sharding/comm.h"
#include "sharding/host_staging.h"
#include "sharding/unit_policy.h"

typedef struct unit_sizes {
  int count;
  int64_t *numel; /* padded flat length, per unit */
  int64_t *shard; /* shard length, per unit */
  int64_t real;   /* unpadded parameters, all units */
  int64_t tables; /* host bytes of the units' parameter tables */
} unit_sizes;

static void unit_sizes_free(unit_sizes *u) { mem_free(u->numel); }

static st_status measure_units(const plan_input *in, unit_sizes *out) {
  memset(out, 0, sizeof *out);
  out->count = in->cfg.n_layer + 2;
  ST_CHECK(mem_alloc_zeroed((void **)&out->numel, 2 * (size_t)out->count * sizeof *out->numel,
                            MEM_HOST, MEM_WORKSPACE, NULL));
  out->shard = out->numel + out->count;
  for (int u = 0; u < out->count; u++) {
    unit_layout l;
    ST_CHECK(unit_layout_init(&l, in->S, in->T, 0));
    st_status status = gpt_declare_unit(&in->cfg, u, &l);
    if (status == ST_OK) {
      out->numel[u] = l.numel;
      out->shard[u] = l.shard_numel;
      for (int k = 0; k < l.count; k++) out->real += l.params[k].numel;
      out->tables += unit_layout_table_bytes(&l);
    }
    unit_layout_free(&l);
    if (status != ST_OK) {
      unit_sizes_free(out);
      return status;
    }
  }
  return ST_OK;
}

/* The peak of the full-unit buffers (category GATHERED), in bytes, walking one step as
 * engine/model/gpt_forward.c and engine/model/gpt_backward.c order it: parameters gathered per use
 * (param dtype) from gather start to release, transient full gradients (reduce dtype) from the
 * unit's first backward to its reduction, and, where the kernels compute in fp32 only, the fp32
 * compute copies of low-precision parameters (wait to release) and gradients (the unit's backward).
 * The buffer pool keeps every buffer handed back for reuse by a buffer of the same size
 * (sharding/buffer_pool.h), so what it holds is, per size, the most buffers of that size in use
 * at once: the sum of those is the peak (at least the most bytes in use at once). */
typedef struct walk {
  const unit_sizes *u;
  unit_policy pol;
  int depth, reshard;
  size_t p, g; /* bytes per element of the param and reduce dtypes */
  int copies_params, copies_grads;
  int *gathered, *param_copy, *has_grads, *grad_copy; /* per unit: which buffers exist */
  /* The buffer pool's classes (buffers of one size are interchangeable): bytes, how many are in
   * use now and at most. At most 3 per unit (param, gradient and fp32 copy sizes). */
  int64_t *class_bytes;
  int *class_now, *class_max;
  int classes;
} walk;

/* Turns `*flag` on or off, counting a buffer of `bytes_per_element` per element of unit i in
 * its size class when it changes. */
static void toggle(walk *w, int *flag, int on, int i, size_t bytes_per_element) {
  if (*flag == on) return;
  *flag = on;
  const int64_t bytes = w->u->numel[i] * (int64_t)bytes_per_element;
  int c = 0;
  while (c < w->classes && w->class_bytes[c] != bytes) c++;
  if (c == w->classes) w->class_bytes[w->classes++] = bytes;
  w->class_now[c] += on ? 1 : -1;
  if (w->class_now[c] > w->class_max[c]) w->class_max[c] = w->class_now[c];
}

static void gather_start(walk *w, int i) {
  if (w->pol.gather_params != UNIT_PARAMS_KEPT && i >= 0 && i < w->u->count)
    toggle(w, &w->gathered[i], 1, i, w->p);
}

static void acquire(walk *w, int i, int direction) {
  gather_start(w, i);
  if (w->copies_params) toggle(w, &w->param_copy[i], 1, i, sizeof(float));
  for (int k = 1; k <= w->depth; k++) gather_start(w, i + k * direction);
}

static void release(walk *w, int i) {
  toggle(w, &w->param_copy[i], 0, i, sizeof(float));
  if (w->pol.gather_params != UNIT_PARAMS_KEPT) toggle(w, &w->gathered[i], 0, i, w->p);
}

static void grads_begin(walk *w, int i) {
  if (w->pol.transient_grads) toggle(w, &w->has_grads[i], 1, i, w->g);
  if (w->copies_grads) toggle(w, &w->grad_copy[i], 1, i, sizeof(float));
}

static void reduced(walk *w, int i) {
  if (i < w->u->count) toggle(w, &w->has_grads[i], 0, i, w->g);
}

/* gpt_backward.c's finish_unit. */
static void finish(walk *w, int i, int reduce) {
  toggle(w, &w->grad_copy[i], 0, i, sizeof(float));
  if (reduce) reduced(w, i + 1);
  release(w, i);
}

static st_status gathered_peak(const plan_input *in, const unit_sizes *u, int64_t *peak) {
  walk w = {.u = u,
            .depth = in->prefetch,
            .reshard = in->reshard_after_forward,
            .p = dtype_size(in->precision.param),
            .g = dtype_size(in->precision.reduce),
            .copies_params = in->compute_copies && in->precision.param != ST_FP32,
            .copies_grads = in->compute_copies && in->precision.reduce != ST_FP32};
  ST_CHECK(unit_policy_for_stage(in->stage, &w.pol));
  ST_CHECK(mem_alloc_zeroed((void **)&w.gathered, 10 * (size_t)u->count * sizeof *w.gathered,
                            MEM_HOST, MEM_WORKSPACE, NULL));
  w.param_copy = w.gathered + u->count;
  w.has_grads = w.param_copy + u->count;
  w.grad_copy = w.has_grads + u->count;
  w.class_now = w.grad_copy + u->count;
  w.class_max = w.class_now + 3 * u->count;
  st_status status =
      mem_alloc_zeroed((void **)&w.class_bytes, 3 * (size_t)u->count * sizeof *w.class_bytes,
                       MEM_HOST, MEM_WORKSPACE, NULL);
  if (status != ST_OK) {
    mem_free(w.gathered);
    return status;
  }
  const int n = u->count, last = n - 1;
  for (int micro = 0; micro < in->grad_accum; micro++) {
    int reduce = micro == in->grad_accum - 1;
    acquire(&w, 0, +1);
    for (int b = 1; b < last; b++) {
      acquire(&w, b, +1);
      if (w.reshard) release(&w, b);
    }
    acquire(&w, last, +1);
    grads_begin(&w, 0); /* the head's backward, chunk by chunk in the forward (gpt_head.c) */
    grads_begin(&w, last);
    finish(&w, last, reduce); /* after ln_f's backward */
    for (int b = last - 1; b >= 0; b--) {
      acquire(&w, b, -1);
      grads_begin(&w, b);
      finish(&w, b, reduce);
    }
  }
  reduced(&w, 0); /* train_step waits for the embedding's reduction last */
  *peak = 0;
  for (int c = 0; c < w.classes; c++) *peak += w.class_max[c] * w.class_bytes[c];
  mem_free(w.class_bytes);
  mem_free(w.gathered);
  return ST_OK;
}

/* The host tokens of every micro-batch of a step (cmd_train's buffer). */
static int64_t host_token_bytes(const plan_input *in) {
  return 2 * (int64_t)in->micro_batch * in->seq_len * in->grad_accum * (int64_t)sizeof(int32_t);
}

/* The fixed memory of the model's kernel backend (its context, from creation to release) in
 * host memory: the CUDA backend's segment staging; the CPU's none. */
static int64_t kernel_host_bytes(const plan_input *in) {
  return (int64_t)kernel_kind_workspace_bytes(in->device, MEM_HOST);
}

/* What checkpoint saves add to the workspace's peak, in host memory: a blocking save's staging,
 * less the step's transient that it stands in for (the attention's scratch, freed by the end of
 * the step, before the save); a background save's snapshot of the owned master, m and v
 * (`optimizer` bytes), which stays alive through the steps. */
static int64_t save_extra_bytes(const plan_input *in, int64_t optimizer) {
  if (!in->checkpoints) return 0;
  if (in->checkpoints_async) return optimizer;
  const int64_t attention = (int64_t)kernel_kind_attention_scratch_bytes(in->device, in->seq_len);
  return PLAN_CKPT_STAGING_BYTES > attention ? PLAN_CKPT_STAGING_BYTES - attention : 0;
}

/* Workspace of a step: the head's chunk of logits, the backward's gradient buffers, token
 * copies and step scalars (gpt_acts), the host tokens of every micro-batch, the kernel backend's
 * fixed workspace (on CUDA cuBLASLt's scratch and the ops' regions, and their host staging), and
 * the largest transient: the attention backward's own scratch (the CPU's T x T scores; none on
 * CUDA), or a save's staging, which is taken between steps, when the attention's is freed;
 * saving in the background, the snapshot of the owned states (`optimizer` bytes) instead; and the
 * model's tables (its units' parameter tables, `tables` bytes, and gpt_table_bytes). */
static int64_t workspace_bytes(const plan_input *in, int64_t optimizer, int64_t tables) {
  int64_t acts = 0, scratch = 0;
  gpt_activation_bytes(&in->cfg, in->device, in->precision.param, in->micro_batch, in->seq_len,
                       in->T, in->recompute, &acts, &scratch);
  const int64_t tokens = host_token_bytes(in);
  const int64_t kernels =
      (int64_t)kernel_kind_workspace_bytes(in->device, MEM_DEVICE) + kernel_host_bytes(in);
  const int64_t attention = (int64_t)kernel_kind_attention_scratch_bytes(in->device, in->seq_len);
  return scratch + tokens + kernels + attention + save_extra_bytes(in, optimizer) + tables +
         gpt_table_bytes(&in->cfg);
}

st_status plan_memory(const plan_input *in, memory_plan *out) {
  memset(out, 0, sizeof *out);
  unit_policy pol;
  ST_CHECK(unit_policy_for_stage(in->stage, &pol));
  unit_sizes u;
  ST_CHECK(measure_units(in, &u));
  int64_t full = 0, shard = 0, largest_owned = 0;
  for (int i = 0; i < u.count; i++) {
    full += u.numel[i];
    shard += u.shard[i];
    const int64_t owned = pol.shard_optimizer ? u.shard[i] : u.numel[i];
    if (owned > largest_owned) largest_owned = owned;
  }
  const int64_t f = (int64_t)sizeof(float), p = (int64_t)dtype_size(in->precision.param),
                g = (int64_t)dtype_size(in->precision.reduce);
  out->psi = u.real;
  out->bytes[MEM_PARAMS] = (uint64_t)((pol.shard_params ? shard : full) * p);
  out->bytes[MEM_GRADS] = (uint64_t)((pol.shard_grads ? shard : full) * g);
  const uint64_t optimizer = (uint64_t)(3 * (pol.shard_optimizer ? shard : full) * f);
  if (in->offload_optimizer) {
    /* offload_host.c stages a ring of chunks, each no larger than the largest owned range. */
    const int64_t slot =
        largest_owned < HOST_STAGING_CHUNK_NUMEL ? largest_owned : HOST_STAGING_CHUNK_NUMEL;
    const int64_t staging = in->device_is_host ? 0 : HOST_STAGING_RING * slot * (g + p);
    out->bytes[MEM_OPTIMIZER_HOST] = optimizer + (uint64_t)staging;
  } else {
    out->bytes[MEM_OPTIMIZER] = optimizer;
  }
  int64_t gathered = 0;
  const st_status status = gathered_peak(in, &u, &gathered);
  const int64_t tables = u.tables;
  unit_sizes_free(&u);
  ST_CHECK(status);
  out->bytes[MEM_GATHERED] = (uint64_t)gathered;
  int64_t acts = 0, scratch = 0;
  gpt_activation_bytes(&in->cfg, in->device, in->precision.param, in->micro_batch, in->seq_len,
                       in->T, in->recompute, &acts, &scratch);
  out->bytes[MEM_ACTIVATIONS] = (uint64_t)acts;
  out->bytes[MEM_WORKSPACE] = (uint64_t)workspace_bytes(in, (int64_t)optimizer, tables);
  out->bytes[MEM_COMM] = 0;
  out->model_states = out->bytes[MEM_PARAMS] + out->bytes[MEM_GRADS] + out->bytes[MEM_OPTIMIZER] +
                      out->bytes[MEM_OPTIMIZER_HOST];
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) out->total += out->bytes[c];
  /* A save's staging or snapshot is host memory: what it adds to the workspace's peak is host
   * bytes, and the device's peak keeps the attention's scratch (none on a GPU, where the
   * staging is then host bytes in full). */
  out->host_bytes = out->bytes[MEM_OPTIMIZER_HOST] + (uint64_t)host_token_bytes(in) +
                    (uint64_t)kernel_host_bytes(in) +
                    (uint64_t)save_extra_bytes(in, (int64_t)optimizer) + (uint64_t)tables +
                    (uint64_t)gpt_table_bytes(&in->cfg);
  out->device_bytes = out->total - out->host_bytes;
  return ST_OK;
}

int plan_compute_copies(st_device_kind kind, unit_precision precision) {
  return !kernel_kind_computes_in(kind, precision.param) ||
         !kernel_kind_computes_in(kind, precision.reduce);
}

st_status plan_comm(const plan_input *in, comm_plan *out) {
  memset(out, 0, sizeof *out);
  unit_policy pol;
  ST_CHECK(unit_policy_for_stage(in->stage, &pol));
  unit_sizes u;
  ST_CHECK(measure_units(in, &u));
  const size_t f = sizeof(float), p = dtype_size(in->precision.param),
               g = dtype_size(in->precision.reduce);
  for (int i = 0; i < u.count; i++) {
    const size_t numel = (size_t)u.numel[i], shard = (size_t)u.shard[i] * g;
    /* Every stage reduce-scatters each unit's gradients once per step. */
    out->shard_reduce_scatter += comm_ring_bytes(COMM_REDUCE_SCATTER, in->S, numel * g);
    /* Gathered per use: in the forward and again in the backward of every micro-batch, except
     * the embedding and final units, which stay gathered from the forward into the backward. */
    int gathers = 0;
    if (pol.gather_params == UNIT_PARAMS_GATHERED_PER_USE) {
      const int kept = i == 0 || i == u.count - 1 || !in->reshard_after_forward;
      gathers = (kept ? 1 : 2) * in->grad_accum;
    }
    gathers += pol.publish_params;
    out->shard_all_gather += (uint64_t)gathers * comm_ring_bytes(COMM_ALL_GATHER, in->S, numel * p);
    if (pol.gather_grads) {
      out->shard_all_gather += comm_ring_bytes(COMM_ALL_GATHER, in->S, numel * g);
    }
    out->replicate_all_reduce += comm_ring_bytes(COMM_ALL_REDUCE, in->R, shard);
  }
  size_t activation = (size_t)in->micro_batch * in->seq_len * in->cfg.n_embd * f;
  /* Block recompute repeats the attention's g in the backward of every block but the last
   * (its MLP output projection, and so its g, is not recomputed). */
  const int recomputed = in->recompute == GPT_RECOMPUTE_BLOCK ? in->cfg.n_layer - 1 : 0;
  out->tp_all_reduce = (uint64_t)(4 * in->cfg.n_layer + recomputed) * in->grad_accum *
                       comm_ring_bytes(COMM_ALL_REDUCE, in->T, activation);
  unit_sizes_free(&u);
  return ST_OK;
}
