/* op_timings.c - the per-kernel timings that calibrate the simulator, on the CPU or a GPU: every
 * kernel call of a GPT micro-batch in the hardware file's op list (engine/plan/sim_ops.h:
 * `kernels = cpu`, the CPU backend's unfused list, or `kernels = fused`, the CUDA backend's), run
 * through the engine's kernels on the chosen device on buffers of the right shapes and dtypes,
 * timed (best of several repetitions), and set beside its roofline at efficiency 1
 * (max(flops / peak, bytes / mem_bw) with the peaks of a `--hardware` file: sim_op_roofline,
 * the simulator's own formula). Per op class, the last lines print the efficiency (roofline
 * time over measured time) as a curve fitted by engine/plan/sim_curve_fit.h from every call of
 * the shapes given, in the form a hardware file takes: over the calls' roofline times (small
 * calls reach less of their roofline than large ones), `eff_<class> = S:E ...`, or, for a class
 * of GEMMs whose calls that key fits better, over their smallest dimension (a 64-row GEMM
 * reaches less of the peak than a 1024-row one of the same roofline time),
 * `eff_<class>@dim = D:E ...`. Each is preceded by a comment with the class's pooled
 * efficiency (its summed roofline time over its summed measured time) and each key's fit error
 * (sim_curve_fit_error).
 *
 * Each op is the call the engine makes, with its aliasing: the classifier writes its gradient
 * over the logits. The fused list's dGELU is the epilogue of kernel_matmul_gelu_backward, timed
 * with it; the CPU list's is timed through kernel_gelu_backward, the same loop as the engine's
 * in-place one adding into a separate buffer: one more read per element, which made it 1-1.5%
 * slower than the in-place loop at M1's size (measured on the 2-core EPYC, 2026-11-23).
 *
 * Activations, weights and gradients are in --dtype (fp32, or bf16 where the backend computes in
 * it: CUDA); LayerNorm and attention statistics, losses and the optimizer's master weights and
 * moments are fp32, as in the engine.
 *
 * Clocks. On the CPU: the calling thread's CPU time, which leaves out other jobs on a shared
 * machine but also any work of other OpenMP threads (with two, every parallel op looked twice as
 * fast as it is), and one rank computes on one core; so it refuses to run on the CPU unless
 * OpenMP has one thread (OMP_NUM_THREADS=1; the CPU backend runs OpenBLAS on one thread always,
 * kernels/cpu/gemm.c). On a GPU: timed events around the one call on its stream, after an
 * untimed first call (cuBLASLt chooses its algorithms there).
 *
 * Usage: op_timings [--device cpu|cuda] [--dtype fp32|bf16] [--seconds-per-op S] --hardware FILE
 * SHAPE... with SHAPE = C,heads,T,B,vocab,tp (e.g. 256,4,256,4,256,1) or opt,N (AdamW, sum of
 * squares and a cast over N elements); each op is repeated for S seconds of wall time (0.3 by
 * default; a test that asserts nothing timed takes less). Bad input: one error line, exit
 * code 2. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "engine/model/gpt_config.h"
#include "engine/plan/sim_curve_fit.h"
#include "engine/plan/sim_hw.h"
#include "engine/plan/sim_ops.h"
#include "kernels/kernels.h"
#include "optim/adamw.h"

/* Scratch the kernels read and write: NBUF buffers of `bytes` each, large enough for any
 * operand in fp32; token ids below the vocabulary. Buffer ONES holds fp32 1.0 (LayerNorm's rstd,
 * AdamW's v), buffer PRISTINE the random values every other buffer is refilled from. */
enum { NBUF = 9, ONES = 7, PRISTINE = 8 };
typedef struct bench {
  st_device dev;
  kernel_backend *kb;
  st_stream stream;
  st_event start, end; /* timed events (GPU clock) */
  int cpu_clock;       /* 1: the thread's CPU time; 0: the events */
  st_dtype dtype;      /* activations, weights and gradients */
  sim_kernels kernels;
  void *buf[NBUF];
  size_t bytes; /* per buffer */
  int32_t *tokens;
  int64_t vocab;         /* rows of the token embedding */
  double seconds_per_op; /* wall time each op is repeated for (--seconds-per-op) */
} bench;

/* This thread's CPU time: on a machine shared with other jobs it leaves out the time they take
 * the core away, and equals the wall time on an idle machine (one thread: OMP_NUM_THREADS=1). */
static double thread_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double wall_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A view of buffer `i` (from its start) as a tensor of `dtype` with `rank` dims. */
static st_tensor view(const bench *b, int i, st_dtype dtype, int rank, const int64_t *shape) {
  st_tensor t;
  tensor_make(&t, b->buf[i], dtype, b->dev.backend->kind, rank, shape);
  return t;
}
/* VIEW(i, dtype, dims...): view() with the dims listed inline. */
#define VIEW(i, dtype, ...)                                                    \
  view(b, i, dtype, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
       (int64_t[]){__VA_ARGS__})
#define ACT(i, ...) VIEW(i, b->dtype, __VA_ARGS__)
#define F32(i, ...) VIEW(i, ST_FP32, __VA_ARGS__)

/* The classifier as the training forward calls it: losses and the logits' gradient over the
 * logits (gpt_head.c). The CPU list names it SIM_K_CE_BWD; the fused list SIM_K_CE_FWD, its one
 * classifier pass, whose losses-only form (evaluation) the fused list never times. */
static int classifier_with_gradient(const bench *b, const sim_op *op) {
  return op->kind == SIM_K_CE_BWD || b->kernels == SIM_KERNELS_FUSED;
}

static st_status run_matmul(bench *b, const sim_op *op) {
  const kernel_backend *kb = b->kb;
  const st_stream *s = &b->stream;
  const int64_t m = op->m, n = op->n, k = op->k;
  const int epilogue = b->kernels == SIM_KERNELS_FUSED && op->d == 1;
  switch (op->kind) {
    case SIM_K_MATMUL_FWD: {
      st_tensor out = ACT(0, m, n), inp = ACT(1, m, k), w = ACT(2, k, n), bias = ACT(3, n),
                pre = ACT(4, m, n);
      if (epilogue) return kernel_matmul_gelu_forward(kb, &out, &pre, &inp, &w, &bias, s);
      return kernel_matmul_forward(kb, &out, &inp, &w, op->bias ? &bias : NULL, s);
    }
    case SIM_K_MATMUL_BWD: {
      st_tensor dinp = ACT(0, m, k), dw = ACT(1, k, n), db = ACT(2, n), dout = ACT(3, m, n),
                inp = ACT(4, m, k), w = ACT(5, k, n), pre = ACT(6, m, n);
      if (epilogue) {
        return kernel_matmul_gelu_backward(kb, &dinp, &dw, &db, &dout, &pre, &inp, &w, s);
      }
      return kernel_matmul_backward(kb, &dinp, &dw, op->bias ? &db : NULL, &dout, &inp, &w, s);
    }
    case SIM_K_HEAD_FWD: {
      st_tensor out = ACT(0, m, n), inp = ACT(1, m, k), w = ACT(2, n, k);
      return kernel_matmul_wt_forward(kb, &out, &inp, &w, s);
    }
    default: { /* SIM_K_HEAD_BWD */
      st_tensor dinp = ACT(0, m, k), dw = ACT(1, n, k), dout = ACT(3, m, n), inp = ACT(4, m, k),
                w = ACT(5, n, k);
      return kernel_matmul_wt_backward(kb, &dinp, &dw, &dout, &inp, &w, s);
    }
  }
}

/* Runs `op` once. */
static st_status run_op(bench *b, const sim_op *op, int seq) {
  const kernel_backend *kb = b->kb;
  const st_stream *s = &b->stream;
  const int64_t m = op->m, n = op->n, k = op->k, d = op->d;
  switch (op->kind) {
    case SIM_K_MATMUL_FWD:
    case SIM_K_MATMUL_BWD:
    case SIM_K_HEAD_FWD:
    case SIM_K_HEAD_BWD: return run_matmul(b, op);
    case SIM_K_LN_FWD: {
      st_tensor out = ACT(0, m, n), mean = F32(1, m), rstd = F32(2, m), inp = ACT(3, m, n),
                w = ACT(4, n), bias = ACT(5, n), res = ACT(6, m, n);
      /* fused: the residual add before the norm (residual = inp + res, in place), unless d = 1 */
      if (b->kernels == SIM_KERNELS_FUSED && d != 1) {
        return kernel_layernorm_residual_forward(kb, &inp, &out, &mean, &rstd, &inp, &res, &w,
                                                 &bias, s);
      }
      return kernel_layernorm_forward(kb, &out, &mean, &rstd, &inp, &w, &bias, s);
    }
    case SIM_K_LN_BWD: {
      st_tensor dinp = ACT(0, m, n), dw = ACT(1, n), db = ACT(2, n), dout = ACT(3, m, n),
                inp = ACT(4, m, n), w = ACT(5, n), mean = F32(6, m), rstd = F32(ONES, m);
      return kernel_layernorm_backward(kb, &dinp, &dw, &db, &dout, &inp, &w, &mean, &rstd, s);
    }
    case SIM_K_GELU_FWD: {
      st_tensor out = ACT(0, m, n), inp = ACT(1, m, n);
      return kernel_gelu_forward(kb, &out, &inp, s);
    }
    case SIM_K_GELU_BWD: {
      st_tensor dinp = ACT(0, m, n), dout = ACT(1, m, n), inp = ACT(2, m, n);
      return kernel_gelu_backward(kb, &dinp, &dout, &inp, s);
    }
    case SIM_K_RESIDUAL: {
      st_tensor out = ACT(0, m, n), a = ACT(1, m, n), c = ACT(2, m, n);
      return kernel_residual_forward(kb, &out, &a, &c, s);
    }
    case SIM_K_ATTN_FWD:
    case SIM_K_ATTN_BWD: { /* batch m, this rank's heads n, sequence k, head size d */
      const int64_t width = n * d;
      st_tensor out = ACT(4, m, k, width), qkv = ACT(2, m, k, 3 * width),
                state = F32(1, kernel_attention_state_numel(kb, m, n, k));
      if (op->kind == SIM_K_ATTN_FWD) return kernel_attention_forward(kb, &out, &state, &qkv, n, s);
      st_tensor dqkv = ACT(0, m, k, 3 * width), dout = ACT(3, m, k, width);
      return kernel_attention_backward(kb, &dqkv, &dout, &qkv, &out, &state, n, s);
    }
    case SIM_K_EMBED_FWD: {
      st_tensor out = ACT(0, m / seq, seq, n), wte = ACT(1, b->vocab, n), wpe = ACT(2, seq, n);
      return kernel_embedding_forward(kb, &out, b->tokens, &wte, &wpe, s);
    }
    case SIM_K_EMBED_BWD: {
      st_tensor dout = ACT(0, m / seq, seq, n), dwte = ACT(1, b->vocab, n), dwpe = ACT(2, seq, n);
      return kernel_embedding_backward(kb, &dwte, &dwpe, &dout, b->tokens, s);
    }
    case SIM_K_CE_FWD:
    case SIM_K_CE_BWD: {
      st_tensor losses = F32(0, m), logits = ACT(1, m, n);
      const int grad = classifier_with_gradient(b, op);
      return kernel_classifier(kb, &losses, grad ? &logits : NULL, &logits, b->tokens, d,
                               grad ? 1e-3f : 0.0f, s);
    }
    case SIM_K_ZERO: return stream_memset(s, b->buf[0], 0, (size_t)(m * n) * dtype_size(b->dtype));
    case SIM_K_ADAMW: {
      const adamw_hparams h = ADAMW_HPARAMS_DEFAULT;
      const kernel_adamw_step step = {1e-4f, h.beta1, h.beta2, h.eps, 1.0f, 3, NULL};
      const kernel_adamw_segment all = {0, m, 0.1f};
      st_tensor master = F32(0, m), mom = F32(1, m), v = F32(ONES, m), grad = ACT(3, m),
                param = ACT(4, m);
      return kernel_adamw(kb, &param, &master, &mom, &v, &grad, &step, &all, 1, s);
    }
    case SIM_K_SUMSQ: {
      st_tensor x = ACT(0, m), sum = F32(1, 1);
      return kernel_sum_squares(kb, &sum, &x, s);
    }
    case SIM_K_CAST: {
      st_tensor src = F32(0, m), dst = VIEW(1, ST_BF16, m);
      return kernel_cast(kb, &dst, &src, s);
    }
    default: return st_error(ST_ERR_INTERNAL, "op kind %d has no kernel here", (int)op->kind);
  }
}

/* Buffer i's first `count` elements back to the random values every op starts from. */
static st_status restore(bench *b, int i, int64_t count) {
  return stream_memcpy(&b->stream, b->buf[i], b->buf[PRISTINE],
                       (size_t)count * dtype_size(b->dtype));
}

/* What a repetition of `op` needs first, untimed: the attention forward leaves valid statistics
 * for its backward; an op that writes over one of its inputs gets it back, so that repetitions
 * do not compound (the classifier's gradient over the logits; in the fused list, the dGELU pass
 * over the gradient and the residual added in place before the norm, which would otherwise
 * drift towards 0 or inf over thousands of repetitions). */
static st_status prepare(bench *b, const sim_op *op, int seq) {
  const int fused = b->kernels == SIM_KERNELS_FUSED;
  const int64_t mn = op->m * op->n;
  if (op->kind == SIM_K_ATTN_BWD) {
    sim_op fwd = *op;
    fwd.kind = SIM_K_ATTN_FWD;
    return run_op(b, &fwd, seq);
  }
  if ((op->kind == SIM_K_CE_FWD || op->kind == SIM_K_CE_BWD) && classifier_with_gradient(b, op)) {
    return restore(b, 1, mn);
  }
  if (fused && op->kind == SIM_K_MATMUL_BWD && op->d == 1) return restore(b, 3, mn);
  if (fused && op->kind == SIM_K_LN_FWD && op->d != 1) return restore(b, 3, mn);
  return ST_OK;
}

/* One timed run of `op` in seconds, on the device's clock. */
static st_status time_once(bench *b, const sim_op *op, int seq, double *seconds) {
  ST_CHECK(prepare(b, op, seq));
  if (b->cpu_clock) {
    const double t0 = thread_now_s();
    ST_CHECK(run_op(b, op, seq));
    *seconds = thread_now_s() - t0;
    return ST_OK;
  }
  ST_CHECK(event_record(&b->start, &b->stream));
  ST_CHECK(run_op(b, op, seq));
  ST_CHECK(event_record(&b->end, &b->stream));
  ST_CHECK(stream_sync(&b->stream));
  double ms = 0;
  ST_CHECK(event_elapsed_ms(&b->start, &b->end, &ms));
  *seconds = 1e-3 * ms;
  return ST_OK;
}

/* Best time of `op` over repetitions lasting about b->seconds_per_op of wall time (at least 3),
 * after one untimed run; 0 when every reading was 0. A reading of 0 is the clock not advancing, not
 * a time: the thread clock of this project's VM once read 0 for a 4 us LayerNorm among readings
 * of 4.0 us. */
static st_status time_op(bench *b, const sim_op *op, int seq, double *best) {
  double t = 0;
  ST_CHECK(time_once(b, op, seq, &t));
  *best = 0;
  const double start = wall_now_s();
  for (int rep = 0; rep < 3 || wall_now_s() - start < b->seconds_per_op; rep++) {
    ST_CHECK(time_once(b, op, seq, &t));
    if (t > 0 && (*best == 0 || t < *best)) *best = t;
  }
  return ST_OK;
}

/* One timed call: its sizes (the keys a curve may take) and its measured time. */
typedef struct timed_call {
  sim_call_size size;
  double measured_s;
} timed_call;

/* Every timed call, per class. */
typedef struct totals {
  timed_call *calls[SIM_CLASS_COUNT];
  int count[SIM_CLASS_COUNT], capacity[SIM_CLASS_COUNT];
} totals;

static st_status add_call(totals *tot, sim_op_class cls, sim_call_size size, double measured_s) {
  if (tot->count[cls] == tot->capacity[cls]) {
    const int capacity = tot->capacity[cls] ? 2 * tot->capacity[cls] : 64;
    timed_call *grown = realloc(tot->calls[cls], (size_t)capacity * sizeof *grown);
    if (!grown) return st_error(ST_ERR_OOM, "out of host memory for the timings");
    tot->calls[cls] = grown;
    tot->capacity[cls] = capacity;
  }
  tot->calls[cls][tot->count[cls]++] = (timed_call){size, measured_s};
  return ST_OK;
}

/* A pseudo-random value of mean 0 and variance 1 (the sum of four uniforms, rescaled). The
 * values must look random: a kernel whose cost depends on its input's values (glibc's tanhf,
 * which the CPU's GELU used until 2026-11-23, branched on the magnitude) would otherwise be
 * timed on what a branch predictor learns. */
static float noise(uint32_t *state) {
  float sum = 0;
  for (int i = 0; i < 4; i++) {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    sum += (float)(*state >> 8) / 16777216.0f;
  }
  return (sum - 2.0f) * 1.7320508f;
}

/* Fills `bytes` of device memory at `dst` with copies of a host block of `count` values of
 * `dtype`. */
static st_status fill_tiled(bench *b, void *dst, size_t bytes, const void *block, size_t count,
                            st_dtype dtype) {
  const size_t block_bytes = count * dtype_size(dtype);
  for (size_t at = 0; at < bytes; at += block_bytes) {
    const size_t n = bytes - at < block_bytes ? bytes - at : block_bytes;
    ST_CHECK(stream_memcpy(&b->stream, (char *)dst + at, block, n));
  }
  return stream_sync(&b->stream);
}

/* The buffers' random values, once per shape: PRISTINE from 4 Mi values of noise in the dtype,
 * repeated (a period of 8 or 16 MiB, which no branch predictor learns), and ONES. */
static st_status fill_constants(bench *b) {
  enum { BLOCK = 1 << 22 };
  float *block = malloc(BLOCK * sizeof(float));
  if (!block) return st_error(ST_ERR_OOM, "out of host memory for the random values");
  uint32_t state = 2463534242u;
  for (size_t j = 0; j < BLOCK; j++) dtype_store_f32(block, b->dtype, j, noise(&state));
  st_status status = fill_tiled(b, b->buf[PRISTINE], b->bytes, block, BLOCK, b->dtype);
  for (size_t j = 0; j < BLOCK; j++) block[j] = 1.0f;
  if (status == ST_OK) status = fill_tiled(b, b->buf[ONES], b->bytes, block, BLOCK, ST_FP32);
  free(block);
  return status;
}

/* Fresh inputs for the next op: every working buffer a copy of PRISTINE again (an earlier op
 * may have left softmax probabilities, mostly zeros, where the next one reads its input), the
 * input buffers 1 and 2 scaled by `input_scale`. ONES is not refilled: AdamW leaves its v near 1
 * (0.999 v + 0.001 g^2). */
static st_status refill(bench *b, float input_scale) {
  const int64_t n = (int64_t)(b->bytes / dtype_size(b->dtype));
  for (int i = 0; i < ONES; i++) ST_CHECK(restore(b, i, n));
  if (input_scale != 1.0f) {
    for (int i = 1; i <= 2; i++) {
      st_tensor x = ACT(i, n);
      ST_CHECK(kernel_scale(b->kb, &x, input_scale, &b->stream));
    }
  }
  return stream_sync(&b->stream);
}

static void free_buffers(bench *b) {
  for (int i = 0; i < NBUF; i++) {
    mem_free(b->buf[i]);
    b->buf[i] = NULL;
  }
  mem_free(b->tokens);
  b->tokens = NULL;
}

static st_status ensure_buffers(bench *b, size_t floats, size_t tokens, int vocab) {
  free_buffers(b);
  b->vocab = vocab;
  b->bytes = floats * sizeof(float);
  for (int i = 0; i < NBUF; i++) {
    ST_CHECK(mem_alloc(&b->buf[i], b->bytes, MEM_DEVICE, MEM_WORKSPACE, &b->dev));
  }
  int32_t *ids = malloc(tokens * sizeof(int32_t));
  if (!ids) return st_error(ST_ERR_OOM, "out of host memory for %zu token ids", tokens);
  for (size_t j = 0; j < tokens; j++) ids[j] = (int32_t)(j * 31 % (size_t)vocab);
  st_status status =
      mem_alloc((void **)&b->tokens, tokens * sizeof(int32_t), MEM_DEVICE, MEM_WORKSPACE, &b->dev);
  if (status == ST_OK) status = stream_memcpy(&b->stream, b->tokens, ids, tokens * sizeof(int32_t));
  if (status == ST_OK) status = stream_sync(&b->stream);
  free(ids);
  ST_CHECK(status);
  return fill_constants(b);
}

static void print_header(void) {
  printf("%-10s %-10s %-13s %12s %12s %11s %11s %6s\n", "phase", "op", "class", "MFLOP", "MB",
         "measured us", "roofline us", "ratio");
}

/* Times one op and adds it to the totals. */
static st_status report(bench *b, const sim_hardware *hw, const char *phase, const sim_op *op,
                        int seq, totals *tot) {
  /* GELU's input as the MLP's up-projection gives it at GPT-2's initialisation, N(0, 0.02^2 x
   * fan-in): the CPU kernel's cost no longer depends on it, but a kernel's might again. */
  const int gelu = op->kind == SIM_K_GELU_FWD || op->kind == SIM_K_GELU_BWD;
  ST_CHECK(refill(b, gelu ? 0.02f * sqrtf((float)op->k) : 1.0f));
  double measured = 0;
  ST_CHECK(time_op(b, op, seq, &measured));
  const double roof = sim_op_roofline(hw, op, sim_hw_peak(hw, (int)dtype_size(b->dtype)));
  if (measured <= 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s %s measured 0 s every time, below the clock's resolution: time larger "
                    "shapes",
                    phase, op->label);
  }
  ST_CHECK(add_call(tot, op->cls, (sim_call_size){roof, sim_op_gemm_dim(op)}, measured));
  printf("%-10s %-10s %-13s %12.2f %12.3f %11.1f %11.1f %6.3f\n", phase, op->label,
         sim_op_class_name(op->cls), op->flops / 1e6, op->bytes / 1e6, measured * 1e6, roof * 1e6,
         roof / measured);
  return ST_OK;
}

/* "opt,N": AdamW, the gradients' sum of squares and an fp32 -> bf16 cast over N elements. */
static st_status run_optimizer(bench *b, const sim_hardware *hw, int64_t n, totals *tot) {
  ST_CHECK(ensure_buffers(b, (size_t)n, 1, 1));
  const int a = (int)dtype_size(b->dtype);
  const sim_shape s = {.act_bytes = a, .kernels = b->kernels};
  printf("\noptimizer over %lld elements (%s gradients and params)\n", (long long)n,
         dtype_name(b->dtype));
  print_header();
  const sim_op ops[3] = {sim_op_make(&s, SIM_K_ADAMW, "adamw", n, a, a, 0, 0),
                         sim_op_make(&s, SIM_K_SUMSQ, "sumsq", n, a, 0, 0, 0),
                         sim_op_make(&s, SIM_K_CAST, "to_bf16", n, 4, 2, 0, 0)};
  for (int i = 0; i < 3; i++) ST_CHECK(report(b, hw, "step", &ops[i], 1, tot));
  return ST_OK;
}

static st_status run_shape(bench *b, const sim_hardware *hw, const char *spec, totals *tot) {
  long long opt = 0;
  if (sscanf(spec, "opt,%lld", &opt) == 1) {
    if (opt < 1) return st_error(ST_ERR_INVALID_ARG, "shape '%s': N must be >= 1", spec);
    return run_optimizer(b, hw, opt, tot);
  }
  int C = 0, heads = 0, T = 0, B = 0, vocab = 0, tp = 0;
  if (sscanf(spec, "%d,%d,%d,%d,%d,%d", &C, &heads, &T, &B, &vocab, &tp) != 6) {
    return st_error(ST_ERR_INVALID_ARG, "shape '%s' is not C,heads,T,B,vocab,tp", spec);
  }
  sim_shape s = {.cfg = {.n_layer = 1, .n_head = heads, .n_embd = C, .vocab = vocab, .max_seq = T},
                 .B = B,
                 .T = T,
                 .tp = tp,
                 .act_bytes = (int)dtype_size(b->dtype),
                 .kernels = b->kernels};
  ST_CHECK(gpt_config_finish(&s.cfg, tp));
  if (B < 1) return st_error(ST_ERR_INVALID_ARG, "shape '%s': B must be >= 1", spec);
  /* The largest operand: logits (B T x padded vocab), the attention state (the CPU's
   * probabilities: B heads T T), MLP activations (B T x 4C), the MLP weights (C x 4C) or the LM
   * head (padded vocab x C). */
  const size_t bt = (size_t)B * T, vp = (size_t)s.cfg.vocab_padded;
  const size_t cand[5] = {bt * vp, (size_t)kernel_attention_state_numel(b->kb, B, heads, T),
                          bt * 4 * C, (size_t)4 * C * C, vp * C};
  size_t floats = 0;
  for (int i = 0; i < 5; i++) floats = cand[i] > floats ? cand[i] : floats;
  ST_CHECK(ensure_buffers(b, floats, bt, vocab));
  printf("\nshape C=%d heads=%d T=%d B=%d vocab=%d tp=%d (%s kernels, %s)\n", C, heads, T, B, vocab,
         tp, b->kernels == SIM_KERNELS_CPU ? "cpu" : "fused", dtype_name(b->dtype));
  print_header();
  static const char *const phases[SIM_PHASE_COUNT] = {"embed_fwd", "block_fwd",       "final_fwd",
                                                      "final_bwd", "block_recompute", "block_bwd",
                                                      "embed_bwd"};
  for (int p = 0; p < SIM_PHASE_COUNT; p++) {
    sim_op ops[SIM_MAX_PHASE_OPS];
    int n = sim_phase_ops(&s, (sim_phase)p, ops);
    for (int i = 0; i < n; i++) ST_CHECK(report(b, hw, phases[p], &ops[i], T, tot));
  }
  return ST_OK;
}

/* ST_OK when the ops run on this thread alone (see the top of the file). */
static st_status check_one_thread(void) {
  const int omp = omp_get_max_threads();
  if (omp == 1) return ST_OK;
  return st_error(ST_ERR_INVALID_ARG,
                  "%d OpenMP threads: the CPU clock counts one thread, so run with "
                  "OMP_NUM_THREADS=1",
                  omp);
}

typedef struct options {
  const char *device, *dtype, *hardware;
  double seconds_per_op;
  int first_shape; /* argv index */
} options;

/* --seconds-per-op: a finite number of seconds in (0, 60]. */
static st_status parse_seconds(const char *text, double *out) {
  char *end = NULL;
  const double s = strtod(text, &end);
  if (end == text || *end != '\0' || !isfinite(s) || s <= 0 || s > 60) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--seconds-per-op '%s' is not a number of seconds in (0, 60]", text);
  }
  *out = s;
  return ST_OK;
}

static st_status parse_options(int argc, char **argv, options *o) {
  *o = (options){"cpu", "fp32", NULL, 0.3, argc};
  int i = 1;
  for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
    if (strcmp(argv[i], "--device") == 0) {
      o->device = argv[i + 1];
    } else if (strcmp(argv[i], "--dtype") == 0) {
      o->dtype = argv[i + 1];
    } else if (strcmp(argv[i], "--hardware") == 0) {
      o->hardware = argv[i + 1];
    } else if (strcmp(argv[i], "--seconds-per-op") == 0) {
      ST_CHECK(parse_seconds(argv[i + 1], &o->seconds_per_op));
    } else {
      return st_error(ST_ERR_INVALID_ARG, "unknown flag '%s'", argv[i]);
    }
  }
  o->first_shape = i;
  if (!o->hardware || i >= argc) {
    return st_error(ST_ERR_INVALID_ARG,
                    "usage: op_timings [--device cpu|cuda] [--dtype fp32|bf16] "
                    "[--seconds-per-op S] --hardware FILE SHAPE... (SHAPE = C,heads,T,B,vocab,tp "
                    "or opt,N)");
  }
  if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0) {
    return st_error(ST_ERR_INVALID_ARG, "--device '%s' is not cpu or cuda", o->device);
  }
  return ST_OK;
}

/* The device, its kernels and its clock, for the options' device and dtype. */
static st_status open_bench(const options *o, const sim_hardware *hw, bench *b) {
  const int dtype = dtype_parse(o->dtype);
  if (dtype != ST_FP32 && dtype != ST_BF16) {
    return st_error(ST_ERR_INVALID_ARG, "--dtype '%s' is not fp32 or bf16", o->dtype);
  }
  b->dtype = (st_dtype)dtype;
  b->kernels = hw->kernels;
  b->seconds_per_op = o->seconds_per_op;
  ST_CHECK(device_select(o->device, 0, &b->dev));
  const st_device_kind kind = b->dev.backend->kind;
  if (!kernel_kind_computes_in(kind, b->dtype)) {
    return st_error(ST_ERR_INVALID_ARG, "the %s backend does not compute in %s", o->device,
                    o->dtype);
  }
  b->cpu_clock = kind == ST_DEVICE_CPU;
  if (b->cpu_clock) ST_CHECK(check_one_thread());
  ST_CHECK(kernel_backend_create(&b->dev, &b->kb));
  ST_CHECK(stream_create(&b->dev, &b->stream));
  if (!b->cpu_clock) {
    ST_CHECK(event_create_timed(&b->dev, &b->start));
    ST_CHECK(event_create_timed(&b->dev, &b->end));
  }
  return ST_OK;
}

static void close_bench(bench *b) {
  free_buffers(b);
  if (b->start.handle) event_destroy(&b->start);
  if (b->end.handle) event_destroy(&b->end);
  if (b->stream.handle) stream_destroy(&b->stream);
  kernel_backend_destroy(b->kb);
}

/* Points of a class's curve: enough to follow the size, few enough that each pools several
 * calls. */
enum { CURVE_POINTS = 6 };

/* The curve of a class's `n` calls keyed by `key` into `out`, and its fit error; `work` holds n
 * timings. */
static st_status fit_keyed(const timed_call *calls, int n, sim_class_key key, sim_call_timing *work,
                           sim_curve *out, double *error) {
  for (int i = 0; i < n; i++) {
    work[i] = (sim_call_timing){sim_call_size_key(calls[i].size, key), calls[i].size.roofline_s,
                                calls[i].measured_s};
  }
  ST_CHECK(sim_curve_fit(work, n, CURVE_POINTS, out));
  *error = sim_curve_fit_error(work, n, out);
  return ST_OK;
}

/* A class's efficiency curve, keyed by roofline time or, where every call is a GEMM, by its
 * smallest dimension if that fits the calls better; with a comment of its pooled efficiency
 * and the fits' errors. */
static st_status print_class(sim_op_class c, const timed_call *calls, int n) {
  double roofline = 0, measured = 0;
  int gemms = 0;
  for (int i = 0; i < n; i++) {
    roofline += calls[i].size.roofline_s;
    measured += calls[i].measured_s;
    gemms += calls[i].size.gemm_dim > 0;
  }
  sim_call_timing *work = malloc((size_t)n * sizeof *work);
  if (!work) return st_error(ST_ERR_OOM, "out of host memory for the fit");
  sim_curve by_time, by_dim;
  double time_error = 0, dim_error = 0;
  st_status status = fit_keyed(calls, n, SIM_KEY_ROOFLINE, work, &by_time, &time_error);
  if (status == ST_OK && gemms == n) {
    status = fit_keyed(calls, n, SIM_KEY_GEMM_DIM, work, &by_dim, &dim_error);
  }
  free(work);
  ST_CHECK(status);
  printf("# %s: %d calls, pooled %.3f; fit error %.1f%% by roofline time", sim_op_class_name(c), n,
         roofline / measured, 100 * time_error);
  if (gemms == n) printf(", %.1f%% by smallest dimension", 100 * dim_error);
  printf("\n");
  const int dim = gemms == n && dim_error < time_error;
  return sim_class_curve_print(stdout, c, dim ? SIM_KEY_GEMM_DIM : SIM_KEY_ROOFLINE,
                               dim ? &by_dim : &by_time);
}

/* The per-class efficiencies, in a hardware file's form. */
static st_status print_classes(totals *tot) {
  printf(
      "\nper class, over all shapes: roofline time / measured time, by roofline time (s) or "
      "by the GEMM's smallest dimension\n");
  for (int c = 0; c < SIM_CLASS_COUNT; c++) {
    if (tot->count[c] > 0) ST_CHECK(print_class((sim_op_class)c, tot->calls[c], tot->count[c]));
  }
  return ST_OK;
}

int main(int argc, char **argv) {
  options o;
  sim_hardware hw;
  bench b = {0};
  totals tot = {0};
  st_status status = parse_options(argc, argv, &o);
  if (status == ST_OK) status = sim_hw_load(o.hardware, &hw);
  if (status == ST_OK) status = open_bench(&o, &hw, &b);
  for (int i = o.first_shape; status == ST_OK && i < argc; i++) {
    status = run_shape(&b, &hw, argv[i], &tot);
  }
  if (status == ST_OK) status = print_classes(&tot);
  close_bench(&b);
  for (int c = 0; c < SIM_CLASS_COUNT; c++) free(tot.calls[c]);
  if (status != ST_OK) {
    fprintf(stderr, "op_timings: error: %s\n", st_last_error());
    return 2;
  }
  return 0;
}
