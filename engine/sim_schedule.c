/* sim_schedule.c - the step replay (see sim_schedule.h). Units are the embedding (0), the
 * blocks (1..L) and the final norm (L+1); every block has the same size, so three layouts
 * give every unit's flat and shard lengths. */
#include "engine/sim_schedule.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/gpt.h"
#include "engine/sim_collective.h"
#include "engine/sim_ops.h"

static const char *const comm_names[SIM_COMM_COUNT] = {"tp",        "gather",  "reduce",
                                                       "replicate", "publish", "scalar"};

const char *sim_comm_kind_name(sim_comm_kind k) {
  return k >= 0 && k < SIM_COMM_COUNT ? comm_names[k] : "?";
}

/* A non-blocking collective in the queue. */
typedef struct queued {
  double dur, done; /* done < 0: not run yet (no overlap) */
} queued;

/* The compute of a unit's phase: its time and that time per op class. */
typedef struct phase_cost {
  double total, by_class[SIM_CLASS_COUNT];
} phase_cost;

typedef struct replay {
  const sim_hardware *hw;
  const plan_input *in;
  sim_result *r;
  int n;                      /* units */
  int64_t numel[3], shard[3]; /* embedding, block, final */
  phase_cost fwd[3], bwd[3];  /* tp all-reduces apart */
  double tp_ar;               /* one tp all-reduce of activations */
  double gather[3], rs[3], repl[3], ag_grads[3], publish[3];
  sim_link shard_link, repl_link, tp_link, dp_link;
  double tc, channel; /* compute stream clock; when the queue's last collective ends */
  queued *q;          /* at most 3 per unit per micro-batch */
  int nq;
  int *gather_at, *reduce_at; /* per unit: queue index, -1 none */
  int *gathered, *has_copy, *has_grads;
} replay;

static int kind_of(const replay *p, int u) { return u == 0 ? 0 : u == p->n - 1 ? 2 : 1; }

static void compute(replay *p, sim_op_class cls, double seconds) {
  p->tc += seconds * p->r->slowdown;
  p->r->class_s[cls] += seconds * p->r->slowdown;
}

static void compute_phase(replay *p, const phase_cost *c) {
  p->tc += c->total * p->r->slowdown;
  for (int k = 0; k < SIM_CLASS_COUNT; k++) p->r->class_s[k] += c->by_class[k] * p->r->slowdown;
}

static void blocking(replay *p, sim_comm_kind kind, double seconds) {
  p->tc += seconds;
  p->r->comm_s[kind] += seconds;
}

static int enqueue(replay *p, sim_comm_kind kind, double seconds) {
  queued *e = &p->q[p->nq];
  e->dur = seconds;
  e->done = -1;
  if (p->hw->overlap) {
    double start = p->channel > p->tc ? p->channel : p->tc;
    e->done = p->channel = start + seconds;
  }
  p->r->comm_s[kind] += seconds;
  return p->nq++;
}

/* The stream waits for queued collective i (and, without overlap, runs every earlier one). */
static void wait_for(replay *p, int i) {
  if (i < 0) return;
  if (!p->hw->overlap) {
    for (int k = 0; k <= i; k++) {
      if (p->q[k].done < 0) p->q[k].done = p->tc = p->tc + p->q[k].dur;
    }
  }
  if (p->q[i].done > p->tc) p->tc = p->q[i].done;
}

static double cast_time(const replay *p, int u, int from, int to) {
  return sim_bytes_time(p->hw, SIM_CAST, (double)p->numel[kind_of(p, u)] * (from + to));
}

static void gather_start(replay *p, int u) {
  if (p->in->stage != 3 || u < 0 || u >= p->n || p->gathered[u]) return;
  p->gathered[u] = 1;
  p->gather_at[u] = enqueue(p, SIM_COMM_GATHER, p->gather[kind_of(p, u)]);
}

static int copies_params(const replay *p) {
  return p->in->compute_copies && p->in->precision.param != ST_FP32;
}

static int copies_grads(const replay *p) {
  return p->in->compute_copies && p->in->precision.reduce != ST_FP32;
}

/* prefetch_acquire: wait for u's gather, then start the next `prefetch` units'. */
static void acquire(replay *p, int u, int direction) {
  gather_start(p, u);
  wait_for(p, p->gather_at[u]);
  p->gather_at[u] = -1;
  if (copies_params(p) && !p->has_copy[u]) {
    p->has_copy[u] = 1;
    compute(p, SIM_CAST, cast_time(p, u, (int)dtype_size(p->in->precision.param), 4));
  }
  for (int k = 1; k <= p->in->prefetch; k++) gather_start(p, u + k * direction);
}

static void release(replay *p, int u) {
  p->has_copy[u] = 0;
  if (p->in->stage == 3) p->gathered[u] = 0;
}

static void grads_begin(replay *p, int u) {
  const int g = (int)dtype_size(p->in->precision.reduce);
  if (p->in->stage >= 2 && !p->has_grads[u]) {
    p->has_grads[u] = 1; /* allocated zero-filled */
    compute(p, SIM_FILL, sim_bytes_time(p->hw, SIM_FILL, (double)p->numel[kind_of(p, u)] * g));
  }
  if (copies_grads(p)) compute(p, SIM_CAST, cast_time(p, u, g, 4));
}

/* unit_reduce_wait: the reduce-scatter, then the blocking replicate all-reduce and stage 0's
 * all-gather of the reduced gradients. */
static void reduce_wait(replay *p, int u) {
  if (u >= p->n || p->reduce_at[u] < 0) return;
  wait_for(p, p->reduce_at[u]);
  p->reduce_at[u] = -1;
  const int k = kind_of(p, u);
  blocking(p, SIM_COMM_REPLICATE, p->repl[k]);
  if (p->in->stage == 0) blocking(p, SIM_COMM_PUBLISH, p->ag_grads[k]);
  if (p->in->stage >= 2) p->has_grads[u] = 0;
}

/* gpt_backward.c's finish_unit. */
static void finish(replay *p, int u, int reduce) {
  const int g = (int)dtype_size(p->in->precision.reduce);
  if (copies_grads(p)) compute(p, SIM_CAST, cast_time(p, u, 4, g));
  if (reduce) {
    p->reduce_at[u] = enqueue(p, SIM_COMM_REDUCE, p->rs[kind_of(p, u)]);
    reduce_wait(p, u + 1);
  }
  release(p, u);
}

static void micro_batch(replay *p, int reduce) {
  const int last = p->n - 1;
  acquire(p, 0, +1);
  compute_phase(p, &p->fwd[0]);
  for (int b = 1; b < last; b++) {
    acquire(p, b, +1);
    compute_phase(p, &p->fwd[1]);
    blocking(p, SIM_COMM_TP, 2 * p->tp_ar);
    if (p->in->reshard_after_forward) release(p, b);
  }
  acquire(p, last, +1);
  compute_phase(p, &p->fwd[2]);
  grads_begin(p, 0);
  grads_begin(p, last);
  compute_phase(p, &p->bwd[2]);
  finish(p, last, reduce);
  for (int b = last - 1; b >= 1; b--) {
    acquire(p, b, -1);
    grads_begin(p, b);
    compute_phase(p, &p->bwd[1]);
    blocking(p, SIM_COMM_TP, 2 * p->tp_ar);
    finish(p, b, reduce);
  }
  acquire(p, 0, -1);
  compute_phase(p, &p->bwd[0]);
  finish(p, 0, reduce);
}

/* Flat and shard lengths of the embedding, a block and the final unit. */
static st_status measure(replay *p) {
  const int index[3] = {0, 1, p->n - 1};
  for (int k = 0; k < 3; k++) {
    unit_layout l;
    ST_CHECK(unit_layout_init(&l, p->in->S, p->in->T, 0));
    st_status status = gpt_declare_unit(&p->in->cfg, index[k], &l);
    p->numel[k] = l.numel;
    p->shard[k] = l.shard_numel;
    unit_layout_free(&l);
    ST_CHECK(status);
  }
  return ST_OK;
}

/* Compute per phase and collective costs per unit kind. */
static void costs(replay *p) {
  const plan_input *in = p->in;
  const sim_hardware *hw = p->hw;
  const int pb = (int)dtype_size(in->precision.param), gb = (int)dtype_size(in->precision.reduce);
  const int cpu = hw->kernels == SIM_KERNELS_CPU;
  (void)gb;
  const sim_shape s = {.cfg = in->cfg,
                       .B = in->micro_batch,
                       .T = in->seq_len,
                       .tp = in->T,
                       .act_bytes = cpu ? 4 : pb,
                       .kernels = hw->kernels};
  const double peak = sim_hw_peak(hw, pb);
  const sim_phase order[2][3] = {{SIM_EMBED_FWD, SIM_BLOCK_FWD, SIM_FINAL_FWD},
                                 {SIM_EMBED_BWD, SIM_BLOCK_BWD, SIM_FINAL_BWD}};
  for (int k = 0; k < 3; k++) {
    phase_cost *f = &p->fwd[k], *b = &p->bwd[k];
    f->total = sim_phase_time(hw, &s, order[0][k], peak, f->by_class);
    b->total = sim_phase_time(hw, &s, order[1][k], peak, b->by_class);
  }
  /* The tp sums are over B x T x C activations in the compute dtype (fp32 on the CPU). */
  p->tp_ar = sim_all_reduce(
      in->T, (double)in->micro_batch * in->seq_len * in->cfg.n_embd * s.act_bytes, p->tp_link);
  for (int k = 0; k < 3; k++) {
    const double numel = (double)p->numel[k], shard = (double)p->shard[k];
    p->gather[k] = sim_ring_all_gather(in->S, numel * pb, p->shard_link);
    p->rs[k] = sim_ring_reduce_scatter(in->S, numel * gb, p->shard_link);
    p->repl[k] = sim_all_reduce(in->R, shard * gb, p->repl_link);
    p->ag_grads[k] = sim_ring_all_gather(in->S, numel * gb, p->shard_link);
    p->publish[k] = sim_ring_all_gather(in->S, numel * pb, p->shard_link);
  }
}

/* After the backward: norm, loss, AdamW and publishing (train_step.c). */
static void optimizer(replay *p) {
  const plan_input *in = p->in;
  const int pb = (int)dtype_size(in->precision.param), gb = (int)dtype_size(in->precision.reduce);
  const sim_shape s = {.act_bytes = 4, .kernels = p->hw->kernels};
  const double start = p->tc;
  for (int u = 0; u < p->n; u++) {
    sim_op op = sim_op_make(&s, SIM_K_SUMSQ, "sumsq", p->shard[kind_of(p, u)], gb, 0, 0, 0);
    compute(p, SIM_OPTIMIZER, sim_op_time(p->hw, &op, p->hw->peak_flops_fp32));
  }
  const sim_link scalar_tp = p->tp_link;
  blocking(p, SIM_COMM_SCALAR, sim_all_reduce(in->S, 4, p->shard_link));
  blocking(p, SIM_COMM_SCALAR, sim_all_reduce(in->T, 4, scalar_tp));
  blocking(p, SIM_COMM_SCALAR, sim_all_reduce(in->R * in->S, 4, p->dp_link));
  for (int u = 0; u < p->n; u++) {
    const int k = kind_of(p, u);
    const int64_t owned = in->stage == 0 ? p->numel[k] : p->shard[k];
    sim_op op = sim_op_make(&s, SIM_K_ADAMW, "adamw", owned, gb, pb, 0, 0);
    compute(p, SIM_OPTIMIZER, sim_op_time(p->hw, &op, p->hw->peak_flops_fp32));
    if (in->stage == 1 || in->stage == 2) blocking(p, SIM_COMM_PUBLISH, p->publish[k]);
  }
  p->r->optimizer_s = p->tc - start;
}

/* The replay's per-unit tables: one block for all of them. */
static st_status replay_alloc(replay *p, int n) {
  p->n = n;
  const size_t ints = 5 * (size_t)n, queue = 3 * (size_t)n + 8;
  ST_CHECK(mem_alloc((void **)&p->q, queue * sizeof *p->q + ints * sizeof(int), MEM_HOST,
                     MEM_WORKSPACE, NULL));
  int *base = (int *)(p->q + queue);
  p->gather_at = base;
  p->reduce_at = base + n;
  p->gathered = base + 2 * n;
  p->has_copy = base + 3 * n;
  p->has_grads = base + 4 * n;
  for (int u = 0; u < n; u++) {
    p->gather_at[u] = p->reduce_at[u] = -1;
    p->gathered[u] = p->has_copy[u] = p->has_grads[u] = 0;
  }
  return ST_OK;
}

static void run(replay *p) {
  const plan_input *in = p->in;
  costs(p);
  /* Stages 0-1 keep full gradients and zero them at the start of the step. */
  if (in->stage <= 1) {
    const double g = (double)dtype_size(in->precision.reduce);
    for (int u = 0; u < p->n; u++) {
      compute(p, SIM_FILL, sim_bytes_time(p->hw, SIM_FILL, (double)p->numel[kind_of(p, u)] * g));
    }
  }
  for (int m = 0; m < in->grad_accum; m++) {
    p->nq = 0; /* every collective of the previous micro-batch has been waited for */
    micro_batch(p, m == in->grad_accum - 1);
  }
  reduce_wait(p, 0);
  optimizer(p);
}

st_status sim_step(const sim_hardware *hw, const plan_input *in, sim_result *out) {
  memset(out, 0, sizeof *out);
  if (in->cfg.n_layer < 1 || in->cfg.n_layer > GPT_MAX_LAYERS || in->grad_accum < 1 ||
      in->micro_batch < 1 || in->seq_len < 1 || in->R < 1 || in->S < 1 || in->T < 1 ||
      in->prefetch < 0 || in->stage < 0 || in->stage > 3) {
    return st_error(ST_ERR_INVALID_ARG,
                    "simulate: mesh %dx%dx%d, stage %d, %d layers, micro-batch %d x %d, "
                    "grad-accum %d, prefetch %d: out of range",
                    in->R, in->S, in->T, in->stage, in->cfg.n_layer, in->micro_batch, in->seq_len,
                    in->grad_accum, in->prefetch);
  }
  replay p = {.hw = hw, .in = in, .r = out};
  const int world = in->R * in->S * in->T;
  const int per_node = world < hw->gpus_per_node ? world : hw->gpus_per_node;
  out->world = world;
  out->slowdown = hw->compute_slots > 0 && per_node > hw->compute_slots
                      ? (double)per_node / hw->compute_slots
                      : 1.0;
  p.tp_link = sim_group_link(hw, in->T, 1);
  p.shard_link = sim_group_link(hw, in->S, in->T);
  p.repl_link = sim_group_link(hw, in->R, in->S * in->T);
  p.dp_link = sim_group_link(hw, in->R * in->S, in->T);
  p.n = in->cfg.n_layer + 2;
  ST_CHECK(measure(&p));
  ST_CHECK(replay_alloc(&p, in->cfg.n_layer + 2));
  run(&p);
  mem_free(p.q);
  out->step_s = p.tc;
  for (int c = 0; c < SIM_CLASS_COUNT; c++) out->compute_s += out->class_s[c];
  out->exposed_s = out->step_s - out->compute_s;
  const double sequences = (double)in->micro_batch * in->R * in->S * in->grad_accum;
  out->model_flops = sim_model_flops(&in->cfg, sequences, in->seq_len);
  out->tokens_per_s = sequences * in->seq_len / out->step_s;
  out->tokens_per_s_per_gpu = out->tokens_per_s / world;
  out->mfu = out->model_flops /
             (out->step_s * world * sim_hw_peak(hw, (int)dtype_size(in->precision.param)));
  return ST_OK;
}
