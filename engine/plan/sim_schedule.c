/* sim_schedule.c - the step replay (see sim_schedule.h). Units are the embedding (0), the
 * blocks (1..L) and the final norm (L+1); every block has the same size, so three layouts
 * give every unit's flat and shard lengths, and three sets of costs every unit's. */
#include "engine/plan/sim_schedule.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/model/gpt.h"
#include "engine/plan/sim_collective.h"
#include "engine/plan/sim_ops.h"
#include "sharding/host_staging.h"
#include "sharding/unit_policy.h"

static const char *const comm_names[SIM_COMM_COUNT] = {"tp",        "gather",  "reduce",
                                                       "replicate", "publish", "scalar"};

const char *sim_comm_kind_name(sim_comm_kind k) {
  return k >= 0 && k < SIM_COMM_COUNT ? comm_names[k] : "?";
}

/* ---- costs -------------------------------------------------------------------------------- */

static st_status check_input(const plan_input *in) {
  if (in->cfg.n_layer < 1 || in->cfg.n_layer > GPT_MAX_LAYERS || in->grad_accum < 1 ||
      in->micro_batch < 1 || in->seq_len < 1 || in->R < 1 || in->S < 1 || in->T < 1 ||
      in->prefetch < 0 || in->stage < 0 || in->stage > 3) {
    return st_error(ST_ERR_INVALID_ARG,
                    "simulate: mesh %dx%dx%d, stage %d, %d layers, micro-batch %d x %d, "
                    "grad-accum %d, prefetch %d: out of range",
                    in->R, in->S, in->T, in->stage, in->cfg.n_layer, in->micro_batch, in->seq_len,
                    in->grad_accum, in->prefetch);
  }
  /* Each size bounded first, so that their product, in 64 bits, cannot wrap. */
  const int64_t ranks =
      in->R <= PLAN_MAX_RANKS && in->S <= PLAN_MAX_RANKS && in->T <= PLAN_MAX_RANKS
          ? (int64_t)in->R * in->S * in->T
          : INT64_MAX;
  if (ranks > PLAN_MAX_RANKS) {
    return st_error(ST_ERR_INVALID_ARG,
                    "simulate: mesh %dx%dx%d is more than the %d ranks a simulation describes",
                    in->R, in->S, in->T, PLAN_MAX_RANKS);
  }
  return ST_OK;
}

/* Flat and shard lengths of the embedding, a block and the final unit. */
static st_status measure(const plan_input *in, int64_t numel[3], int64_t shard[3]) {
  const int index[3] = {0, 1, in->cfg.n_layer + 1};
  for (int k = 0; k < 3; k++) {
    unit_layout l;
    ST_CHECK(unit_layout_init(&l, in->S, in->T, 0));
    st_status status = gpt_declare_unit(&in->cfg, index[k], &l);
    numel[k] = l.numel;
    shard[k] = l.shard_numel;
    unit_layout_free(&l);
    ST_CHECK(status);
  }
  return ST_OK;
}

/* AdamW with the optimizer offloaded to the host of a GPU (optim/offload_host.h's staging): the
 * owned range in K = owned / HOST_STAGING_CHUNK_NUMEL chunks (at least 1), each chunk's
 * gradients copied down and its parameters copied up over the host link (c per chunk) and
 * updated by the host between them, reading the gradients, master, m and v and writing master,
 * m, v and the parameters at the host's memory bandwidth (h per chunk; the roofline,
 * uncalibrated). The units' chunks form one pipeline of two resources, so each chunk costs the
 * slower of the two, K max(c, h) for the unit, and the step pays the first chunk's other
 * resource once (*fill, min(c, h): nothing overlaps the first gradients' copy down, or the last
 * parameters' copy up where the host is the faster). */
static double offloaded_adamw_time(const sim_hardware *hw, double owned, int grad_bytes,
                                   int param_bytes, double *fill) {
  const double chunks = owned > HOST_STAGING_CHUNK_NUMEL ? owned / HOST_STAGING_CHUNK_NUMEL : 1;
  const double copy = owned / chunks * (grad_bytes + param_bytes) / hw->host_link_bw;
  const double host = owned / chunks * (grad_bytes + 24.0 + param_bytes) / hw->host_mem_bw;
  *fill = copy < host ? copy : host;
  return chunks * (copy > host ? copy : host);
}

/* A collective of `n` ranks over `bytes` on `link` at the fraction of its bandwidth the
 * hardware's calibration gives for that group size and buffer. */
static double collective_time(const sim_hardware *hw, sim_collective op, int n, double bytes,
                              sim_link link) {
  const double moved = bytes / sim_hw_comm_efficiency(hw, op, n, bytes);
  if (op == SIM_ALL_GATHER) return sim_ring_all_gather(n, moved, link);
  if (op == SIM_REDUCE_SCATTER) return sim_ring_reduce_scatter(n, moved, link);
  return sim_all_reduce(n, moved, link);
}

st_status sim_costs_of(const sim_hardware *hw, const plan_input *in, sim_costs *c) {
  memset(c, 0, sizeof *c);
  ST_CHECK(check_input(in));
  int64_t numel[3], shard[3];
  ST_CHECK(measure(in, numel, shard));
  unit_policy pol;
  ST_CHECK(unit_policy_for_stage(in->stage, &pol));
  const int world = in->R * in->S * in->T;
  const int per_node = world < hw->gpus_per_node ? world : hw->gpus_per_node;
  c->slowdown = hw->compute_slots > 0 && per_node > hw->compute_slots
                    ? (double)per_node / hw->compute_slots
                    : 1.0;
  c->overlap = hw->overlap;
  const sim_link tp = sim_group_link(hw, in->T, 1), sh = sim_group_link(hw, in->S, in->T),
                 repl = sim_group_link(hw, in->R, in->S * in->T),
                 dp = sim_group_link(hw, in->R * in->S, in->T);
  /* Each collective on its link at its calibrated fraction of the bandwidth; on a node with
   * fewer compute slots than ranks (a CPU), the copies take turns too. */
#define AG(n, bytes, l) (c->slowdown * collective_time(hw, SIM_ALL_GATHER, n, bytes, l))
#define RS(n, bytes, l) (c->slowdown * collective_time(hw, SIM_REDUCE_SCATTER, n, bytes, l))
#define AR(n, bytes, l) (c->slowdown * collective_time(hw, SIM_ALL_REDUCE, n, bytes, l))
  const int pb = (int)dtype_size(in->precision.param), gb = (int)dtype_size(in->precision.reduce);
  const int cpu = hw->kernels == SIM_KERNELS_CPU;
  /* fp16 trains with loss scaling (train_options_loss_scaler): a finite check over the owned
   * gradients beside their sum of squares, and the overflow flag beside the norm. */
  const int scaling = in->precision.param == ST_FP16 || in->precision.reduce == ST_FP16;
  /* Where device memory is host RAM (the CPU) the offloaded optimizer does exactly the resident
   * one's work; elsewhere it crosses the host link. */
  const int offload_staged = in->offload_optimizer && !cpu;
  if (offload_staged && !sim_hw_has_host_link(hw)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "hardware '%s' gives no host_link_bw and host_mem_bw: --offload optimizer "
                    "cannot be simulated on it",
                    hw->name);
  }
  const sim_shape s = {.cfg = in->cfg,
                       .B = in->micro_batch,
                       .T = in->seq_len,
                       .tp = in->T,
                       .act_bytes = cpu ? 4 : pb,
                       .kernels = hw->kernels,
                       .recompute = in->recompute};
  const double peak = sim_hw_peak(hw, pb);
  const sim_phase phases[2][3] = {{SIM_EMBED_FWD, SIM_BLOCK_FWD, SIM_FINAL_FWD},
                                  {SIM_EMBED_BWD, SIM_BLOCK_BWD, SIM_FINAL_BWD}};
  for (int k = 0; k < 3; k++) {
    c->fwd[k] = sim_phase_time(hw, &s, phases[0][k], peak, c->fwd_class[k]);
    c->bwd[k] = sim_phase_time(hw, &s, phases[1][k], peak, c->bwd_class[k]);
  }
  c->recompute = sim_phase_time(hw, &s, SIM_BLOCK_RECOMPUTE, peak, c->recompute_class);
  /* The tp sums are over B x T x C activations in the compute dtype (fp32 on the CPU). */
  c->tp_all_reduce =
      AR(in->T, (double)in->micro_batch * in->seq_len * in->cfg.n_embd * s.act_bytes, tp);
  const sim_shape flat = {.act_bytes = 4, .kernels = hw->kernels};
  for (int k = 0; k < 3; k++) {
    const double n = (double)numel[k], sn = (double)shard[k];
    c->gather[k] = AG(in->S, n * pb, sh);
    c->reduce_scatter[k] = RS(in->S, n * gb, sh);
    c->replicate[k] = AR(in->R, sn * gb, repl);
    c->grad_gather[k] = pol.gather_grads ? AG(in->S, n * gb, sh) : 0;
    c->publish[k] = pol.publish_params ? AG(in->S, n * pb, sh) : 0;
    c->fill[k] = sim_bytes_time(hw, SIM_FILL, n * gb);
    c->cast_params[k] = sim_bytes_time(hw, SIM_CAST, n * (pb + 4));
    c->cast_grads[k] = sim_bytes_time(hw, SIM_CAST, n * (gb + 4));
    sim_op op = sim_op_make(&flat, SIM_K_SUMSQ, "sumsq", shard[k], gb, 0, 0, 0);
    c->sumsq[k] = (scaling ? 2 : 1) * sim_op_time(hw, &op, hw->peak_flops_fp32);
    const int64_t owned = pol.shard_optimizer ? shard[k] : numel[k];
    op = sim_op_make(&flat, SIM_K_ADAMW, "adamw", owned, gb, pb, 0, 0);
    c->adamw[k] = sim_op_time(hw, &op, hw->peak_flops_fp32);
    double fill = 0;
    if (offload_staged) c->adamw[k] = offloaded_adamw_time(hw, (double)owned, gb, pb, &fill);
    if (k == 0) c->adamw_fill = fill; /* the embedding's chunks come first */
  }
  /* The norm's sums over the shard and tp groups (with loss scaling the overflow flag beside
   * it, then its maximum over the replicate group), the loss's mean over the dp group. */
  const double norm_bytes = scaling ? 8 : 4;
  c->scalars = AR(in->S, norm_bytes, sh) + AR(in->T, norm_bytes, tp) + AR(in->R * in->S, 4, dp) +
               (scaling ? AR(in->R, 4, repl) : 0);
#undef AG
#undef RS
#undef AR
  return ST_OK;
}

/* ---- the replay ------------------------------------------------------------------------- */

/* A non-blocking collective in the queue. */
typedef struct queued {
  double dur, done; /* done < 0: not run yet (no overlap) */
} queued;

typedef struct replay {
  const plan_input *in;
  unit_policy pol;
  const sim_costs *c;
  sim_result *r;
  int n;              /* units */
  double tc, channel; /* compute stream clock; when the queue's last collective ends */
  queued *q;          /* at most 3 per unit per micro-batch */
  int nq;
  int *gather_at, *reduce_at; /* per unit: queue index, -1 none */
  int *gathered, *has_copy, *has_grads;
} replay;

static int kind_of(const replay *p, int u) { return u == 0 ? 0 : u == p->n - 1 ? 2 : 1; }

static void compute(replay *p, sim_op_class cls, double seconds) {
  p->tc += seconds * p->c->slowdown;
  p->r->class_s[cls] += seconds * p->c->slowdown;
}

static void compute_phase(replay *p, double total, const double *by_class) {
  p->tc += total * p->c->slowdown;
  for (int k = 0; k < SIM_CLASS_COUNT; k++) p->r->class_s[k] += by_class[k] * p->c->slowdown;
}

static void blocking(replay *p, sim_comm_kind kind, double seconds) {
  p->tc += seconds;
  p->r->comm_s[kind] += seconds;
}

static int enqueue(replay *p, sim_comm_kind kind, double seconds) {
  queued *e = &p->q[p->nq];
  e->dur = seconds;
  e->done = -1;
  if (p->c->overlap) {
    double start = p->channel > p->tc ? p->channel : p->tc;
    e->done = p->channel = start + seconds;
  }
  p->r->comm_s[kind] += seconds;
  return p->nq++;
}

/* The stream waits for queued collective i (and, without overlap, runs every earlier one). */
static void wait_for(replay *p, int i) {
  if (i < 0) return;
  if (!p->c->overlap) {
    for (int k = 0; k <= i; k++) {
      if (p->q[k].done < 0) p->q[k].done = p->tc = p->tc + p->q[k].dur;
    }
  }
  if (p->q[i].done > p->tc) p->tc = p->q[i].done;
}

static void gather_start(replay *p, int u) {
  if (p->pol.gather_params == UNIT_PARAMS_KEPT || u < 0 || u >= p->n || p->gathered[u]) return;
  p->gathered[u] = 1;
  p->gather_at[u] = enqueue(p, SIM_COMM_GATHER, p->c->gather[kind_of(p, u)]);
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
    compute(p, SIM_CAST, p->c->cast_params[kind_of(p, u)]);
  }
  for (int k = 1; k <= p->in->prefetch; k++) gather_start(p, u + k * direction);
}

static void release(replay *p, int u) {
  p->has_copy[u] = 0;
  if (p->pol.gather_params != UNIT_PARAMS_KEPT) p->gathered[u] = 0;
}

static void grads_begin(replay *p, int u) {
  if (p->pol.transient_grads && !p->has_grads[u]) {
    p->has_grads[u] = 1; /* allocated zero-filled */
    compute(p, SIM_FILL, p->c->fill[kind_of(p, u)]);
  }
  if (copies_grads(p)) compute(p, SIM_CAST, p->c->cast_grads[kind_of(p, u)]);
}

/* unit_reduce_wait: the reduce-scatter, then the blocking replicate all-reduce and the policy's
 * all-gather of the reduced gradients. */
static void reduce_wait(replay *p, int u) {
  if (u >= p->n || p->reduce_at[u] < 0) return;
  wait_for(p, p->reduce_at[u]);
  p->reduce_at[u] = -1;
  const int k = kind_of(p, u);
  blocking(p, SIM_COMM_REPLICATE, p->c->replicate[k]);
  blocking(p, SIM_COMM_PUBLISH, p->c->grad_gather[k]);
  if (p->pol.transient_grads) p->has_grads[u] = 0;
}

/* gpt_backward.c's finish_unit: the compute copy of u's gradients is cast back; on the last
 * micro-batch the reduction of the unit before it in the backward (u + 1) is finished and only
 * then u's reduce-scatter started (unit_reduce_handoff), so u's waits behind u + 1's blocking
 * replicate all-reduce and publish; then u is released. */
static void finish(replay *p, int u, int reduce) {
  if (copies_grads(p)) compute(p, SIM_CAST, p->c->cast_grads[kind_of(p, u)]);
  if (reduce) {
    reduce_wait(p, u + 1);
    p->reduce_at[u] = enqueue(p, SIM_COMM_REDUCE, p->c->reduce_scatter[kind_of(p, u)]);
  }
  release(p, u);
}

static void micro_batch(replay *p, int reduce) {
  const sim_costs *c = p->c;
  const int last = p->n - 1;
  acquire(p, 0, +1);
  compute_phase(p, c->fwd[0], c->fwd_class[0]);
  for (int b = 1; b < last; b++) {
    acquire(p, b, +1);
    compute_phase(p, c->fwd[1], c->fwd_class[1]);
    blocking(p, SIM_COMM_TP, 2 * c->tp_all_reduce);
    if (p->in->reshard_after_forward) release(p, b);
  }
  acquire(p, last, +1);
  compute_phase(p, c->fwd[2], c->fwd_class[2]);
  grads_begin(p, 0);
  grads_begin(p, last);
  compute_phase(p, c->bwd[2], c->bwd_class[2]);
  finish(p, last, reduce);
  for (int b = last - 1; b >= 1; b--) {
    acquire(p, b, -1);
    grads_begin(p, b);
    if (b < last - 1) { /* the last block's activations are still in place */
      compute_phase(p, c->recompute, c->recompute_class);
      if (p->in->recompute == GPT_RECOMPUTE_BLOCK) blocking(p, SIM_COMM_TP, c->tp_all_reduce);
    }
    compute_phase(p, c->bwd[1], c->bwd_class[1]);
    blocking(p, SIM_COMM_TP, 2 * c->tp_all_reduce);
    finish(p, b, reduce);
  }
  /* The embedding stayed gathered from the forward (gpt_backward.c acquires it no more). */
  compute_phase(p, c->bwd[0], c->bwd_class[0]);
  finish(p, 0, reduce);
}

/* After the backward: norm, loss, AdamW and publishing (train_step.c). */
static void optimizer(replay *p) {
  const double start = p->tc;
  for (int u = 0; u < p->n; u++) compute(p, SIM_GRAD_NORM, p->c->sumsq[kind_of(p, u)]);
  blocking(p, SIM_COMM_SCALAR, p->c->scalars);
  compute(p, SIM_OPTIMIZER, p->c->adamw_fill);
  for (int u = 0; u < p->n; u++) {
    compute(p, SIM_OPTIMIZER, p->c->adamw[kind_of(p, u)]);
    blocking(p, SIM_COMM_PUBLISH, p->c->publish[kind_of(p, u)]);
  }
  p->r->optimizer_s = p->tc - start;
}

st_status sim_replay(const plan_input *in, const sim_costs *c, sim_result *out) {
  memset(out, 0, sizeof *out);
  ST_CHECK(check_input(in));
  replay p = {.in = in, .c = c, .r = out, .n = in->cfg.n_layer + 2};
  ST_CHECK(unit_policy_for_stage(in->stage, &p.pol));
  /* One block for the queue and the per-unit tables. */
  const size_t ints = 5 * (size_t)p.n, queue = 3 * (size_t)p.n + 8;
  ST_CHECK(mem_alloc((void **)&p.q, queue * sizeof *p.q + ints * sizeof(int), MEM_HOST,
                     MEM_WORKSPACE, NULL));
  int *base = (int *)(p.q + queue);
  p.gather_at = base;
  p.reduce_at = base + p.n;
  p.gathered = base + 2 * p.n;
  p.has_copy = base + 3 * p.n;
  p.has_grads = base + 4 * p.n;
  for (int u = 0; u < p.n; u++) {
    p.gather_at[u] = p.reduce_at[u] = -1;
    p.gathered[u] = p.has_copy[u] = p.has_grads[u] = 0;
  }
  /* Resident full gradients are zeroed at the start of the step. */
  if (!p.pol.transient_grads) {
    for (int u = 0; u < p.n; u++) compute(&p, SIM_FILL, c->fill[kind_of(&p, u)]);
  }
  for (int m = 0; m < in->grad_accum; m++) {
    p.nq = 0; /* every collective of the previous micro-batch has been waited for */
    micro_batch(&p, m == in->grad_accum - 1);
  }
  reduce_wait(&p, 0);
  optimizer(&p);
  mem_free(p.q);
  out->step_s = p.tc;
  out->slowdown = c->slowdown;
  for (int k = 0; k < SIM_CLASS_COUNT; k++) out->compute_s += out->class_s[k];
  /* The two sums add the same compute times in other orders: a step with nothing exposed may
   * differ by a rounding, below 0 ("-0.00 ms"). */
  out->exposed_s = fmax(0.0, out->step_s - out->compute_s);
  return ST_OK;
}

st_status sim_step(const sim_hardware *hw, const plan_input *in, sim_result *out) {
  sim_costs c;
  ST_CHECK(sim_costs_of(hw, in, &c));
  ST_CHECK(sim_replay(in, &c, out));
  out->world = in->R * in->S * in->T;
  const double sequences = (double)in->micro_batch * in->R * in->S * in->grad_accum;
  out->model_flops = sequences * in->seq_len * gpt_config_flops_per_token(&in->cfg, in->seq_len);
  out->tokens_per_s = sequences * in->seq_len / out->step_s;
  out->tokens_per_s_per_gpu = out->tokens_per_s / out->world;
  out->mfu = out->model_flops /
             (out->step_s * out->world * sim_hw_peak(hw, (int)dtype_size(in->precision.param)));
  /* A description whose numbers overflow a step (op_overhead = 1e308) or shrink its throughput
   * to nothing (efficiencies near 0) has no prediction to report. */
  if (!isfinite(out->step_s) || !(out->step_s > 0) || !isnormal(out->tokens_per_s_per_gpu) ||
      !isnormal(out->mfu)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "hardware '%s' predicts a step of %g s at MFU %g: not a finite time with a "
                    "throughput above 0 (check its peaks, efficiencies and op_overhead)",
                    hw->name, out->step_s, out->mfu);
  }
  return ST_OK;
}
