/* cpu_op_timings.c - the per-kernel timings that calibrate the simulator on the CPU: every
 * kernel call of a GPT micro-batch (the simulator's own CPU op list, engine/plan/sim_ops.h), run
 * through the engine's CPU kernels on buffers of the right shapes, timed (best of several
 * repetitions), and set beside its roofline at efficiency 1 (max(flops / peak, bytes / mem_bw)
 * with the peaks of a `--hardware` file: sim_op_time at efficiency 1, the simulator's own
 * formula). Per op class, the efficiency is the class's roofline time over its measured time,
 * summed over the ops of the shapes given (so the classes that take most of a step weigh most);
 * the last lines print them as `eff_<class> = <value>`, the form a hardware file takes.
 *
 * Each op is the call the engine makes, with its aliasing: the classifier writes its gradient
 * over the logits. One exception: the engine's dGELU runs in place inside
 * kernel_matmul_gelu_backward, which cannot be timed apart from its products, so it is timed
 * through kernel_gelu_backward, the same loop adding into a separate buffer: one more read per
 * element, which made it 1-1.5% slower than the in-place loop at M1's size (measured on the
 * 2-core EPYC, 2026-11-23), the loop being bound by its tanh.
 *
 * One thread only: the clock is the calling thread's CPU time, which leaves out other jobs on a
 * shared machine but also any work of other OpenMP or OpenBLAS threads (with two, every
 * parallel op looked twice as fast as it is and barrier spins under load made a few
 * hundreds of times slower), and one rank computes on one core. So it refuses to run unless
 * OpenMP and OpenBLAS both have one thread (OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1).
 *
 * Usage: cpu_op_timings --hardware FILE SHAPE...  with SHAPE = C,heads,T,B,vocab,tp
 * (e.g. 256,4,256,4,256,1) or opt,N (AdamW, sum of squares and a cast over N elements). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "engine/model/gpt_config.h"
#include "engine/plan/sim_hw.h"
#include "engine/plan/sim_ops.h"
#include "kernels/kernels.h"
#include "optim/adamw.h"

/* This thread's CPU time: on a machine shared with other jobs it leaves out the time they take
 * the core away, and equals the wall time on an idle machine (one thread: OMP_NUM_THREADS=1). */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Scratch the kernels read and write: NBUF float buffers, each large enough for any operand;
 * token ids below the vocabulary. */
enum { NBUF = 7, ONES = 6 }; /* buffer ONES holds 1.0: LayerNorm's rstd, AdamW's v */
typedef struct bench {
  kernel_backend *kb;
  st_stream stream;
  float *buf[NBUF];
  size_t floats; /* per buffer */
  int32_t *tokens;
  int64_t vocab; /* rows of the token embedding */
} bench;

static st_tensor t2(float *data, int64_t a, int64_t b) {
  const int64_t shape[2] = {a, b};
  st_tensor t;
  tensor_make(&t, data, ST_FP32, ST_DEVICE_CPU, 2, shape);
  return t;
}

static st_tensor t1(float *data, int64_t a) {
  st_tensor t;
  tensor_make(&t, data, ST_FP32, ST_DEVICE_CPU, 1, &a);
  return t;
}

static st_tensor t3(float *data, int64_t a, int64_t b, int64_t c) {
  const int64_t shape[3] = {a, b, c};
  st_tensor t;
  tensor_make(&t, data, ST_FP32, ST_DEVICE_CPU, 3, shape);
  return t;
}

static st_tensor t4(float *data, int64_t a, int64_t b, int64_t c, int64_t d) {
  const int64_t shape[4] = {a, b, c, d};
  st_tensor t;
  tensor_make(&t, data, ST_FP32, ST_DEVICE_CPU, 4, shape);
  return t;
}

/* Runs `op` once on the CPU kernels. */
static st_status run_op(bench *b, const sim_op *op, int seq) {
  const kernel_backend *kb = b->kb;
  const st_stream *s = &b->stream;
  float **f = b->buf;
  const int64_t m = op->m, n = op->n, k = op->k, d = op->d;
  switch (op->kind) {
    case SIM_K_MATMUL_FWD: {
      st_tensor out = t2(f[0], m, n), inp = t2(f[1], m, k), w = t2(f[2], k, n), bias = t1(f[3], n);
      return kernel_matmul_forward(kb, &out, &inp, &w, op->bias ? &bias : NULL, s);
    }
    case SIM_K_MATMUL_BWD: {
      st_tensor dinp = t2(f[0], m, k), dw = t2(f[1], k, n), db = t1(f[2], n), dout = t2(f[3], m, n),
                inp = t2(f[4], m, k), w = t2(f[5], k, n);
      return kernel_matmul_backward(kb, &dinp, &dw, op->bias ? &db : NULL, &dout, &inp, &w, s);
    }
    case SIM_K_HEAD_FWD: {
      st_tensor out = t2(f[0], m, n), inp = t2(f[1], m, k), w = t2(f[2], n, k);
      return kernel_matmul_wt_forward(kb, &out, &inp, &w, s);
    }
    case SIM_K_HEAD_BWD: {
      st_tensor dinp = t2(f[0], m, k), dw = t2(f[1], n, k), dout = t2(f[3], m, n),
                inp = t2(f[4], m, k), w = t2(f[5], n, k);
      return kernel_matmul_wt_backward(kb, &dinp, &dw, &dout, &inp, &w, s);
    }
    case SIM_K_LN_FWD: {
      st_tensor out = t2(f[0], m, n), mean = t1(f[1], m), rstd = t1(f[2], m), inp = t2(f[3], m, n),
                w = t1(f[4], n), bias = t1(f[5], n);
      return kernel_layernorm_forward(kb, &out, &mean, &rstd, &inp, &w, &bias, s);
    }
    case SIM_K_LN_BWD: {
      st_tensor dinp = t2(f[0], m, n), dw = t1(f[1], n), db = t1(f[2], n), dout = t2(f[3], m, n),
                inp = t2(f[4], m, n), w = t1(f[5], n), mean = t1(f[1] + n, m),
                rstd = t1(f[ONES], m);
      return kernel_layernorm_backward(kb, &dinp, &dw, &db, &dout, &inp, &w, &mean, &rstd, s);
    }
    case SIM_K_GELU_FWD: {
      st_tensor out = t2(f[0], m, n), inp = t2(f[1], m, n);
      return kernel_gelu_forward(kb, &out, &inp, s);
    }
    case SIM_K_GELU_BWD: {
      st_tensor dinp = t2(f[0], m, n), dout = t2(f[1], m, n), inp = t2(f[2], m, n);
      return kernel_gelu_backward(kb, &dinp, &dout, &inp, s);
    }
    case SIM_K_RESIDUAL: {
      st_tensor out = t2(f[0], m, n), a = t2(f[1], m, n), c = t2(f[2], m, n);
      return kernel_residual_forward(kb, &out, &a, &c, s);
    }
    case SIM_K_ATTN_FWD: {
      const int64_t width = n * d; /* this rank's heads */
      st_tensor out = t3(f[0], m, k, width), probs = t4(f[1], m, n, k, k),
                qkv = t3(f[2], m, k, 3 * width);
      return kernel_attention_forward(kb, &out, &probs, &qkv, n, s);
    }
    case SIM_K_ATTN_BWD: {
      const int64_t width = n * d;
      st_tensor dqkv = t3(f[0], m, k, 3 * width), dout = t3(f[3], m, k, width),
                qkv = t3(f[2], m, k, 3 * width), probs = t4(f[1], m, n, k, k),
                out = t3(f[4], m, k, width);
      return kernel_attention_backward(kb, &dqkv, &dout, &qkv, &out, &probs, n, s);
    }
    case SIM_K_EMBED_FWD: {
      st_tensor out = t3(f[0], m / seq, seq, n), wte = t2(f[1], b->vocab, n),
                wpe = t2(f[2], seq, n);
      return kernel_embedding_forward(kb, &out, b->tokens, &wte, &wpe, s);
    }
    case SIM_K_EMBED_BWD: {
      st_tensor dout = t3(f[0], m / seq, seq, n), dwte = t2(f[1], b->vocab, n),
                dwpe = t2(f[2], seq, n);
      return kernel_embedding_backward(kb, &dwte, &dwpe, &dout, b->tokens, s);
    }
    case SIM_K_CE_FWD: {
      st_tensor losses = t1(f[0], m), logits = t2(f[1], m, n);
      return kernel_classifier(kb, &losses, NULL, &logits, b->tokens, d, 0.0f, s);
    }
    case SIM_K_CE_BWD: { /* the gradient over the logits, as gpt_head.c asks */
      st_tensor logits = t2(f[1], m, n), losses = t1(f[2], m);
      return kernel_classifier(kb, &losses, &logits, &logits, b->tokens, d, 1e-3f, s);
    }
    case SIM_K_ZERO: return stream_memset(s, f[0], 0, (size_t)(m * n) * sizeof(float));
    case SIM_K_ADAMW: {
      const adamw_hparams h = ADAMW_HPARAMS_DEFAULT;
      const kernel_adamw_step step = {1e-4f, h.beta1, h.beta2, h.eps, 1.0f, 3, NULL};
      const kernel_adamw_segment all = {0, m, 0.1f};
      st_tensor master = t1(f[0], m), mom = t1(f[1], m), v = t1(f[ONES], m), grad = t1(f[3], m),
                param = t1(f[4], m);
      return kernel_adamw(kb, &param, &master, &mom, &v, &grad, &step, &all, 1, s);
    }
    case SIM_K_SUMSQ: {
      st_tensor x = t1(f[0], m), sum = t1(f[1], 1);
      return kernel_sum_squares(kb, &sum, &x, s);
    }
    case SIM_K_CAST: {
      st_tensor src = t1(f[0], m), dst;
      ST_CHECK(tensor_make(&dst, f[1], ST_BF16, ST_DEVICE_CPU, 1, &m));
      return kernel_cast(kb, &dst, &src, s);
    }
    default: return st_error(ST_ERR_INTERNAL, "op kind %d has no kernel here", (int)op->kind);
  }
}

/* What a repetition of `op` needs first, untimed: the attention forward leaves valid
 * probabilities for its backward; the classifier gets back the logits its last run overwrote
 * (a copy kept in buffer 3). */
static st_status prepare(bench *b, const sim_op *op, int seq) {
  if (op->kind == SIM_K_ATTN_BWD) {
    sim_op fwd = *op;
    fwd.kind = SIM_K_ATTN_FWD;
    return run_op(b, &fwd, seq);
  }
  if (op->kind == SIM_K_CE_BWD) {
    memcpy(b->buf[1], b->buf[3], (size_t)(op->m * op->n) * sizeof(float));
  }
  return ST_OK;
}

/* Best time of `op` over repetitions lasting about 0.3 s (at least 3). */
static st_status time_op(bench *b, const sim_op *op, int seq, double *best) {
  *best = 1e30;
  double start = now_s();
  for (int rep = 0; rep < 3 || now_s() - start < 0.3; rep++) {
    ST_CHECK(prepare(b, op, seq));
    double t0 = now_s();
    ST_CHECK(run_op(b, op, seq));
    double t = now_s() - t0;
    if (t < *best) *best = t;
  }
  return ST_OK;
}

typedef struct totals {
  double roofline[SIM_CLASS_COUNT], measured[SIM_CLASS_COUNT];
} totals;

/* A pseudo-random value of mean 0 and variance 1 (the sum of four uniforms, rescaled). The
 * values must look random: tanh and exp branch on their argument, and a regular pattern lets
 * the branch predictor make GELU look up to twice as fast as it is in training. */
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

/* Fresh inputs for the next op: every buffer random again (an earlier op may have left
 * softmax probabilities, mostly zeros, where the next one reads its input). */
static void refill(bench *b) {
  uint32_t state = 2463534242u;
  for (int i = 0; i < NBUF; i++) {
    for (size_t j = 0; j < b->floats; j++) b->buf[i][j] = i == ONES ? 1.0f : noise(&state);
  }
}

static st_status ensure_buffers(bench *b, size_t floats, size_t tokens, int vocab) {
  b->vocab = vocab;
  for (int i = 0; i < NBUF; i++) {
    mem_free(b->buf[i]);
    b->buf[i] = NULL;
    ST_CHECK(mem_alloc((void **)&b->buf[i], floats * sizeof(float), MEM_HOST, MEM_WORKSPACE, NULL));
  }
  b->floats = floats;
  mem_free(b->tokens);
  b->tokens = NULL;
  ST_CHECK(mem_alloc((void **)&b->tokens, tokens * sizeof(int32_t), MEM_HOST, MEM_WORKSPACE, NULL));
  for (size_t j = 0; j < tokens; j++) b->tokens[j] = (int32_t)(j * 31 % (size_t)vocab);
  return ST_OK;
}

static void print_header(void) {
  printf("%-10s %-10s %-13s %12s %12s %11s %11s %6s\n", "phase", "op", "class", "MFLOP", "MB",
         "measured us", "roofline us", "ratio");
}

/* Times one op and adds it to the totals. */
static st_status report(bench *b, const sim_hardware *hw, const char *phase, const sim_op *op,
                        int seq, totals *tot) {
  double measured = 0;
  refill(b);
  if (op->kind == SIM_K_GELU_FWD || op->kind == SIM_K_GELU_BWD) {
    /* GELU's input as the MLP's up-projection gives it at GPT-2's initialisation, N(0, 0.02^2
     * x fan-in): the kernel's cost no longer depends on it (glibc's tanhf, which it used until
     * 2026-11-23, branched on the magnitude), but a kernel's might again. */
    const float scale = 0.02f * sqrtf((float)op->k);
    for (size_t j = 0; j < b->floats; j++) {
      b->buf[1][j] *= scale;
      b->buf[2][j] *= scale;
    }
  }
  ST_CHECK(time_op(b, op, seq, &measured));
  const double roof = sim_op_time(hw, op, hw->peak_flops_fp32);
  tot->roofline[op->cls] += roof;
  tot->measured[op->cls] += measured;
  printf("%-10s %-10s %-13s %12.2f %12.3f %11.1f %11.1f %6.3f\n", phase, op->label,
         sim_op_class_name(op->cls), op->flops / 1e6, op->bytes / 1e6, measured * 1e6, roof * 1e6,
         roof / measured);
  return ST_OK;
}

/* "opt,N": AdamW, the gradients' sum of squares and an fp32 -> bf16 cast over N elements. */
static st_status run_optimizer(bench *b, const sim_hardware *hw, int64_t n, totals *tot) {
  ST_CHECK(ensure_buffers(b, (size_t)n, 1, 1));
  const sim_shape s = {.act_bytes = 4, .kernels = SIM_KERNELS_CPU};
  printf("\noptimizer over %lld elements (fp32 gradients and params)\n", (long long)n);
  print_header();
  const sim_op ops[3] = {sim_op_make(&s, SIM_K_ADAMW, "adamw", n, 4, 4, 0, 0),
                         sim_op_make(&s, SIM_K_SUMSQ, "sumsq", n, 4, 0, 0, 0),
                         sim_op_make(&s, SIM_K_CAST, "to_bf16", n, 4, 2, 0, 0)};
  for (int i = 0; i < 3; i++) ST_CHECK(report(b, hw, "step", &ops[i], 1, tot));
  return ST_OK;
}

static st_status run_shape(bench *b, const sim_hardware *hw, const char *spec, totals *tot) {
  long long opt = 0;
  if (sscanf(spec, "opt,%lld", &opt) == 1) return run_optimizer(b, hw, opt, tot);
  int C = 0, heads = 0, T = 0, B = 0, vocab = 0, tp = 0;
  if (sscanf(spec, "%d,%d,%d,%d,%d,%d", &C, &heads, &T, &B, &vocab, &tp) != 6) {
    return st_error(ST_ERR_INVALID_ARG, "shape '%s' is not C,heads,T,B,vocab,tp", spec);
  }
  sim_shape s = {.cfg = {.n_layer = 1, .n_head = heads, .n_embd = C, .vocab = vocab, .max_seq = T},
                 .B = B,
                 .T = T,
                 .tp = tp,
                 .act_bytes = 4,
                 .kernels = SIM_KERNELS_CPU};
  ST_CHECK(gpt_config_finish(&s.cfg, tp));
  /* The largest operand: logits (B T x padded vocab), scores (B heads T T), MLP activations
   * (B T x 4C), the MLP weights (C x 4C) or the LM head (padded vocab x C). */
  const size_t bt = (size_t)B * T, vp = (size_t)s.cfg.vocab_padded;
  const size_t cand[5] = {bt * vp, (size_t)B * heads * T * T, bt * 4 * C, (size_t)4 * C * C,
                          vp * C};
  size_t floats = 0;
  for (int i = 0; i < 5; i++) floats = cand[i] > floats ? cand[i] : floats;
  ST_CHECK(ensure_buffers(b, floats, bt, vocab));
  printf("\nshape C=%d heads=%d T=%d B=%d vocab=%d tp=%d\n", C, heads, T, B, vocab, tp);
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
  const int omp = omp_get_max_threads(), blas = openblas_get_num_threads();
  if (omp == 1 && blas == 1) return ST_OK;
  return st_error(ST_ERR_INVALID_ARG,
                  "%d OpenMP and %d OpenBLAS threads: the clock counts one thread, so run with "
                  "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1",
                  omp, blas);
}

/* The hardware file's peaks with every class at efficiency 1 and no call overhead, so that
 * sim_op_time gives the bare roofline. */
static st_status load_roofline(const char *path, sim_hardware *hw) {
  ST_CHECK(sim_hw_load(path, hw));
  for (int c = 0; c < SIM_CLASS_COUNT; c++) hw->efficiency[c] = 1.0;
  hw->op_overhead = 0;
  return ST_OK;
}

int main(int argc, char **argv) {
  if (argc < 4 || strcmp(argv[1], "--hardware") != 0) {
    fprintf(stderr, "usage: cpu_op_timings --hardware FILE C,heads,T,B,vocab,tp...\n");
    return 2;
  }
  sim_hardware hw;
  st_status status = check_one_thread();
  if (status == ST_OK) status = load_roofline(argv[2], &hw);
  st_device dev = device_cpu();
  bench b = {0};
  if (status == ST_OK) status = kernel_backend_create(&dev, &b.kb);
  if (status == ST_OK) status = stream_create(&dev, &b.stream);
  totals tot = {{0}, {0}};
  for (int i = 3; status == ST_OK && i < argc; i++) status = run_shape(&b, &hw, argv[i], &tot);
  if (status == ST_OK) {
    printf("\nper class, over all shapes: roofline time / measured time\n");
    for (int c = 0; status == ST_OK && c < SIM_CLASS_COUNT; c++) {
      if (tot.roofline[c] > 0 && tot.measured[c] <= 0) {
        /* Printed as missing, the class would keep efficiency 1 in the hardware file. */
        status = st_error(ST_ERR_INVALID_ARG,
                          "class %s: every op measured 0 s, below the thread clock's "
                          "resolution: time larger shapes",
                          sim_op_class_name((sim_op_class)c));
      } else if (tot.measured[c] > 0) {
        printf("eff_%s = %.3f\n", sim_op_class_name((sim_op_class)c),
               tot.roofline[c] / tot.measured[c]);
      }
    }
  }
  for (int i = 0; i < NBUF; i++) mem_free(b.buf[i]);
  mem_free(b.tokens);
  stream_destroy(&b.stream);
  kernel_backend_destroy(b.kb);
  if (status != ST_OK) {
    fprintf(stderr, "cpu_op_timings: error: %s\n", st_last_error());
    return 2;
  }
  return 0;
}
