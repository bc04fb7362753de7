/* ops_vocab_test.c - every op of the kernel vocabulary on the CUDA backend, against the CPU
 * backend (or float64 loops where the CPU backend lacks the op), in fp32, bf16 and fp16, forward
 * and backward, on odd shapes: B=3, T=37, C=80, NH=5 (head size 16), V=251 padded to 256;
 * LayerNorm also at C=84 (its element-by-element path) and d12's 768; the classifier also
 * padded to 253 (its element-by-element path), at GPT-2's vocabulary (50257 padded to 50304,
 * d12's head) and with NaN logits; AdamW also over ranges of several
 * blocks; attention also at head size 64 over 150 rows (B=2, C=128, NH=2: aligned, with every
 * operand 2 bytes past a 16-byte boundary, and with only dout and dqkv so) and at d12's heads over
 * 9 sequences of 1024 (kAttnShapes), on the simple attention kernels (ST_CUDA_ATTENTION=simple,
 * set for that backend), and once more with each other kind of ST_CUDA_ATTENTION:
 * flash (the tiled kernels: 16-bit P and dS, within the 16-bit tolerances) and cudnn (cuDNN's
 * fused attention, the same tolerances; the test fails when the backend could not run that kind,
 * e.g. no libcudnn.so.9, or a build without it).
 *
 * The test walks kernel_op 0..KERNEL_OP_COUNT and FAILS if an op has no case here (checked
 * even without a GPU), then, with a GPU, runs each case for every dtype CUDA supports for the
 * op; then the ops whose backward writes parameter gradients (matmul, its tied-head and GELU
 * forms, LayerNorm, embedding) again with bf16 and fp16 activations and fp32 parameter
 * gradients (run_fp32_grads: held to fp32's tolerance), and their refusals (a gradient dtype the
 * kernels do not write; sizes the context's scratch cannot take, before anything is written).
 * Inputs are random and non-zero, gradients start non-zero (backward ops accumulate); 16-bit inputs
 * are rounded to their dtype first and the CPU computes in fp32 on the rounded values, so the
 * comparison measures the CUDA kernels' own rounding only.
 *
 * Tolerances (ops_pair.c), a value passing when |got - want| <= abs * max|want| + rel * |want|
 * over the compared array:
 *
 *   CUDA dtype   abs (x max|want|)   rel     why
 *   fp32         1e-5                1e-4    fp32 sums of <= 320 terms in another order than
 *                                            OpenBLAS (~1e-6); a wrong formula is off by 1e-2+
 *   bf16         1e-2                1e-2    outputs rounded to bf16 (2^-9 relative), plus bf16
 *                                            intermediates (attention's out, dGELU's dpre)
 *   fp16         4e-3                4e-3    the same with fp16's 2^-11: 4x finer than bf16, the
 *                                            bound 2.5x tighter (not yet run on a GPU)
 *   scalars      -                   2e-6    sums of squares / sums accumulated in double and
 *                                            rounded once into fp32 (against float64)
 *   exact        0                   0       casts, scale, residual in fp32 and the finite flag
 *
 * Ops the CPU backend does not have yet (the GELU-epilogue matmul, AdamW, scale, the finite
 * check, fp16 casts and fp16 sums of squares) are compared with float64 loops written here,
 * so this test does not depend on when they land there. Determinism: the backward ops whose
 * gradients are sums over rows (matmul bias, LayerNorm, attention, embedding) and the scalar
 * sums are run twice from the same start and must give the same bits.
 *
 * The cases of the whole-buffer ops and AdamW live in ops_vocab_buffers.c, those of attention
 * (every ST_CUDA_ATTENTION kind) in ops_vocab_attention.c, the classifier's in
 * ops_vocab_classifier.c, the operands on both backends and the comparisons in ops_pair.c.
 *
 * Without a GPU (or in a CPU-only build) it prints SKIP and passes after the completeness walk.
 * Under compute-sanitizer: see tests/gpu/BUILD. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kernels/cuda_facts.h"
#include "tests/gpu/ops_pair.h"
#include "tests/testing.h"

enum { B = OPS_B, T = OPS_T, C = OPS_C, NH = OPS_NH, V = OPS_V, VP = OPS_VP, MAXT = 40 };
#define ROWS ((int64_t)B * T)

static const char *dt_name(st_dtype dt) { return dtype_name(dt); }

static double gelu64(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double gelu_grad64(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
  return 0.5 * (1.0 + th) +
         0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* " with fp32 grads" where a case's parameter gradients are fp32 beside 16-bit activations. */
static const char *grads_note(st_dtype dt, st_dtype gdt) {
  return gdt != dt ? " with fp32 grads" : "";
}

/* One layer: inp [B, T, C], weight [C, outs] (or [outs, C] for the tied head), optional bias;
 * the weight's and bias's gradients in gdt (dt, or fp32), compared under gdt's tolerance. */
static void matmul_layer(pair_env *e, st_dtype dt, st_dtype gdt, int64_t outs, int out_in,
                         int with_bias) {
  char op[64];
  snprintf(op, sizeof op, "%s%s",
           out_in      ? "matmul_wt"
           : with_bias ? "matmul"
                       : "matmul (no bias)",
           grads_note(dt, gdt));
  int64_t act[] = {B, T, C}, out_shape[] = {B, T, outs};
  int64_t wshape[] = {out_in ? outs : C, out_in ? C : outs};
  pair inp = pair_make(e, dt, 3, act, -1, 1), w = pair_make(e, dt, 2, wshape, -1, 1);
  pair bias = pair_make(e, dt, 1, &outs, -1, 1), out = pair_make(e, dt, 3, out_shape, 7, 7);
  pair dout = pair_make(e, dt, 3, out_shape, -1, 1), dinp = pair_make(e, dt, 3, act, -1, 1);
  pair dw = pair_make(e, gdt, 2, wshape, -1, 1), db = pair_make(e, gdt, 1, &outs, -1, 1);
  if (out_in) {
    CHECK_OK(kernel_matmul_wt_forward(e->cpu, &out.cpu, &inp.cpu, &w.cpu, &e->cpu_stream));
    CHECK_OK(kernel_matmul_wt_forward(e->gpu, &out.gpu, &inp.gpu, &w.gpu, &e->gpu_stream));
  } else {
    const st_tensor *bc = with_bias ? &bias.cpu : NULL, *bg = with_bias ? &bias.gpu : NULL;
    CHECK_OK(kernel_matmul_forward(e->cpu, &out.cpu, &inp.cpu, &w.cpu, bc, &e->cpu_stream));
    CHECK_OK(kernel_matmul_forward(e->gpu, &out.gpu, &inp.gpu, &w.gpu, bg, &e->gpu_stream));
  }
  pair_check(e, ops_label(op, "forward out", dt), &out);
  float *first[3] = {NULL, NULL, NULL};
  for (int run = 0; run < 2; run++) {
    pair_reset(e, &dinp);
    pair_reset(e, &dw);
    pair_reset(e, &db);
    if (out_in) {
      if (run == 0) {
        CHECK_OK(kernel_matmul_wt_backward(e->cpu, &dinp.cpu, &dw.cpu, &dout.cpu, &inp.cpu, &w.cpu,
                                           &e->cpu_stream));
      }
      CHECK_OK(kernel_matmul_wt_backward(e->gpu, &dinp.gpu, &dw.gpu, &dout.gpu, &inp.gpu, &w.gpu,
                                         &e->gpu_stream));
    } else {
      if (run == 0) {
        CHECK_OK(kernel_matmul_backward(e->cpu, &dinp.cpu, &dw.cpu, with_bias ? &db.cpu : NULL,
                                        &dout.cpu, &inp.cpu, &w.cpu, &e->cpu_stream));
      }
      CHECK_OK(kernel_matmul_backward(e->gpu, &dinp.gpu, &dw.gpu, with_bias ? &db.gpu : NULL,
                                      &dout.gpu, &inp.gpu, &w.gpu, &e->gpu_stream));
    }
    pair *grads[3] = {&dinp, &dw, &db};
    for (int g = 0; g < 3; g++) {
      float *got = pair_fetch_new(e, grads[g]);
      if (run == 0) {
        static const char *names[3] = {"backward dinp", "backward dweight", "backward dbias"};
        pair_compare_f(ops_label(op, names[g], dt), grads[g]->dtype, got, grads[g]->host,
                       grads[g]->n);
        first[g] = got;
      } else {
        CHECK_MSG(ops_same_bits(first[g], got, grads[g]->n),
                  "%s: backward gradient %d is not bit-identical on a second run [%s]", op, g,
                  dt_name(dt));
        free(got);
        free(first[g]);
      }
    }
  }
  pair *all[] = {&inp, &w, &bias, &out, &dout, &dinp, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

static void matmul_cases(pair_env *e, st_dtype dt, st_dtype gdt) {
  matmul_layer(e, dt, gdt, 3 * C, 0, 1);
  matmul_layer(e, dt, gdt, 3 * C, 0, 0);
  matmul_layer(e, dt, gdt, 84, 0, 1); /* a width not a multiple of 8 */
  matmul_layer(e, dt, gdt, VP, 1, 0); /* the tied LM head */
}

static void case_matmul(pair_env *e, st_dtype dt) { matmul_cases(e, dt, dt); }

/* ---- matmul with the GELU epilogue (float64 reference: no CPU op yet) ---------------------- */

/* The weight's and bias's gradients in gdt (dt, or fp32). With fp32 ones the reference of
 * their sums reads the dpre the kernel stored (in dt, checked first against float64): the
 * products read that rounded value, and the sums are then held to fp32's tolerance. */
static void matmul_gelu_layer(pair_env *e, st_dtype dt, st_dtype gdt, int64_t outs) {
  char op[80];
  snprintf(op, sizeof op, "%s%s",
           outs % 8 || dt == ST_FP32 ? "matmul_gelu (matmul + GELU kernel)"
                                     : "matmul_gelu (GELU_AUX_BIAS epilogue)",
           grads_note(dt, gdt));
  int64_t act[] = {B, T, C}, out_shape[] = {B, T, outs}, wshape[] = {C, outs};
  const int64_t N = ROWS, n_out = N * outs;
  pair inp = pair_make(e, dt, 3, act, -1, 1), w = pair_make(e, dt, 2, wshape, -0.5, 0.5);
  pair bias = pair_make(e, dt, 1, &outs, -1, 1), out = pair_make(e, dt, 3, out_shape, 7, 7);
  pair pre = pair_make(e, dt, 3, out_shape, 7, 7);
  double *want_pre = malloc((size_t)n_out * sizeof *want_pre);
  double *want_out = malloc((size_t)n_out * sizeof *want_out);
  for (int64_t r = 0; r < N; r++) {
    for (int64_t o = 0; o < outs; o++) {
      double s = bias.init[o];
      for (int64_t c = 0; c < C; c++) s += (double)inp.init[r * C + c] * w.init[c * outs + o];
      want_pre[r * outs + o] = s;
      want_out[r * outs + o] = gelu64(s);
    }
  }
  CHECK_OK(kernel_matmul_gelu_forward(e->gpu, &out.gpu, &pre.gpu, &inp.gpu, &w.gpu, &bias.gpu,
                                      &e->gpu_stream));
  float *got = pair_fetch_new(e, &pre);
  pair_compare(ops_label(op, "forward pre_gelu", dt), dt, got, want_pre, n_out);
  pair_fetch(e, &out, got);
  pair_compare(ops_label(op, "forward out", dt), dt, got, want_out, n_out);
  free(got);

  /* Backward from a given pre_gelu and dout: dout becomes dpre = dout gelu'(pre). */
  pair pre_in = pair_make(e, dt, 3, out_shape, -3, 3), dout = pair_make(e, dt, 3, out_shape, -1, 1);
  pair dinp = pair_make(e, dt, 3, act, -1, 1), dw = pair_make(e, gdt, 2, wshape, -1, 1);
  pair db = pair_make(e, gdt, 1, &outs, -1, 1);
  double *dpre = malloc((size_t)n_out * sizeof *dpre);
  double *want_dinp = malloc((size_t)(N * C) * sizeof *want_dinp);
  double *want_dw = malloc((size_t)(C * outs) * sizeof *want_dw);
  double *want_db = malloc((size_t)outs * sizeof *want_db);
  for (int64_t i = 0; i < n_out; i++) dpre[i] = dout.init[i] * gelu_grad64(pre_in.init[i]);
  for (int64_t r = 0; r < N; r++) {
    for (int64_t c = 0; c < C; c++) {
      double s = 0.0; /* dinp is overwritten (kernels.h), whatever it held */
      for (int64_t o = 0; o < outs; o++) s += dpre[r * outs + o] * w.init[c * outs + o];
      want_dinp[r * C + c] = s;
    }
  }
  CHECK_OK(kernel_matmul_gelu_backward(e->gpu, &dinp.gpu, &dw.gpu, &db.gpu, &dout.gpu, &pre_in.gpu,
                                       &inp.gpu, &w.gpu, &e->gpu_stream));
  got = pair_fetch_new(e, &dout);
  pair_compare(ops_label(op, "backward dout := dpre", dt), dt, got, dpre, n_out);
  if (gdt != dt) {
    for (int64_t i = 0; i < n_out; i++) dpre[i] = got[i];
  }
  free(got);
  for (int64_t c = 0; c < C; c++) {
    for (int64_t o = 0; o < outs; o++) {
      double s = dw.init[c * outs + o];
      for (int64_t r = 0; r < N; r++) s += (double)inp.init[r * C + c] * dpre[r * outs + o];
      want_dw[c * outs + o] = s;
    }
  }
  for (int64_t o = 0; o < outs; o++) {
    double s = db.init[o];
    for (int64_t r = 0; r < N; r++) s += dpre[r * outs + o];
    want_db[o] = s;
  }
  got = pair_fetch_new(e, &dinp);
  pair_compare(ops_label(op, "backward dinp", dt), dt, got, want_dinp, N * C);
  free(got);
  got = pair_fetch_new(e, &dw);
  pair_compare(ops_label(op, "backward dweight", dt), gdt, got, want_dw, C * outs);
  free(got);
  got = pair_fetch_new(e, &db);
  pair_compare(ops_label(op, "backward dbias", dt), gdt, got, want_db, outs);
  free(got);
  free(want_pre);
  free(want_out);
  free(dpre);
  free(want_dinp);
  free(want_dw);
  free(want_db);
  pair *all[] = {&inp, &w, &bias, &out, &pre, &pre_in, &dout, &dinp, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

static void matmul_gelu_cases(pair_env *e, st_dtype dt, st_dtype gdt) {
  matmul_gelu_layer(e, dt, gdt, 4 * C); /* bf16: cuBLASLt's GELU_AUX_BIAS epilogue */
  matmul_gelu_layer(e, dt, gdt, 84);    /* a width the epilogue refuses: matmul + GELU kernel */
}

static void case_matmul_gelu(pair_env *e, st_dtype dt) { matmul_gelu_cases(e, dt, dt); }

/* ---- LayerNorm ---------------------------------------------------------------------------- */

/* LayerNorm over rows of `ch` features: 16-byte loads where ch is a multiple of 8, else element
 * by element; the weight's and bias's gradients in gdt (dt, or fp32). */
static void layernorm_at(pair_env *e, st_dtype dt, st_dtype gdt, int64_t ch) {
  char op[64];
  snprintf(op, sizeof op, "%s%s", ch % 8 ? "layernorm (element path)" : "layernorm",
           grads_note(dt, gdt));
  int64_t act[] = {B, T, ch}, rows = ROWS;
  pair a = pair_make(e, dt, 3, act, -2, 3), b = pair_make(e, dt, 3, act, -1, 1);
  pair w = pair_make(e, dt, 1, &ch, 0.5, 1.5), bias = pair_make(e, dt, 1, &ch, -1, 1);
  pair out = pair_make(e, dt, 3, act, 7, 7), mean = pair_make(e, ST_FP32, 1, &rows, 7, 7);
  pair rstd = pair_make(e, ST_FP32, 1, &rows, 7, 7);
  CHECK_OK(kernel_layernorm_forward(e->cpu, &out.cpu, &mean.cpu, &rstd.cpu, &a.cpu, &w.cpu,
                                    &bias.cpu, &e->cpu_stream));
  CHECK_OK(kernel_layernorm_forward(e->gpu, &out.gpu, &mean.gpu, &rstd.gpu, &a.gpu, &w.gpu,
                                    &bias.gpu, &e->gpu_stream));
  pair_check(e, ops_label(op, "forward out", dt), &out);
  pair_check(e, ops_label(op, "forward mean", dt), &mean);
  pair_check(e, ops_label(op, "forward rstd", dt), &rstd);

  /* The residual variant, updating the residual stream in place (residual aliases a). */
  CHECK_OK(kernel_layernorm_residual_forward(e->cpu, &a.cpu, &out.cpu, &mean.cpu, &rstd.cpu, &a.cpu,
                                             &b.cpu, &w.cpu, &bias.cpu, &e->cpu_stream));
  CHECK_OK(kernel_layernorm_residual_forward(e->gpu, &a.gpu, &out.gpu, &mean.gpu, &rstd.gpu, &a.gpu,
                                             &b.gpu, &w.gpu, &bias.gpu, &e->gpu_stream));
  pair_check(e, ops_label(op, "residual forward residual (in place)", dt), &a);
  pair_check(e, ops_label(op, "residual forward out", dt), &out);
  /* CUDA normalises the residual it stored (rounded to bf16), the CPU its fp32 sum: the
   * statistics differ by the residual's rounding, so they take the case's tolerance */
  pair_check_as(e, ops_label(op, "residual forward mean", dt), &mean, dt);
  pair_check_as(e, ops_label(op, "residual forward rstd", dt), &rstd, dt);

  /* Backward from a fresh input (rounded to the dtype on both sides) and each backend's own
   * saved statistics of it. */
  pair x = pair_make(e, dt, 3, act, -2, 3);
  CHECK_OK(kernel_layernorm_forward(e->cpu, &out.cpu, &mean.cpu, &rstd.cpu, &x.cpu, &w.cpu,
                                    &bias.cpu, &e->cpu_stream));
  CHECK_OK(kernel_layernorm_forward(e->gpu, &out.gpu, &mean.gpu, &rstd.gpu, &x.gpu, &w.gpu,
                                    &bias.gpu, &e->gpu_stream));
  pair dout = pair_make(e, dt, 3, act, -1, 1), dinp = pair_make(e, dt, 3, act, -1, 1);
  pair dw = pair_make(e, gdt, 1, &ch, -1, 1), db = pair_make(e, gdt, 1, &ch, -1, 1);
  CHECK_OK(kernel_layernorm_backward(e->cpu, &dinp.cpu, &dw.cpu, &db.cpu, &dout.cpu, &x.cpu, &w.cpu,
                                     &mean.cpu, &rstd.cpu, &e->cpu_stream));
  float *first[3];
  pair *grads[3] = {&dinp, &dw, &db};
  static const char *names[3] = {"backward dinp", "backward dweight", "backward dbias"};
  for (int run = 0; run < 2; run++) {
    for (int g = 0; g < 3 && run == 1; g++) pair_reset(e, grads[g]);
    CHECK_OK(kernel_layernorm_backward(e->gpu, &dinp.gpu, &dw.gpu, &db.gpu, &dout.gpu, &x.gpu,
                                       &w.gpu, &mean.gpu, &rstd.gpu, &e->gpu_stream));
    for (int g = 0; g < 3; g++) {
      float *got = pair_fetch_new(e, grads[g]);
      if (run == 0) {
        pair_compare_f(ops_label(op, names[g], dt), grads[g]->dtype, got, grads[g]->host,
                       grads[g]->n);
        first[g] = got;
      } else {
        CHECK_MSG(ops_same_bits(first[g], got, grads[g]->n),
                  "%s: %s is not bit-identical on a second run [%s]", op, names[g], dt_name(dt));
        free(got);
        free(first[g]);
      }
    }
  }
  pair *all[] = {&a, &b, &x, &w, &bias, &out, &mean, &rstd, &dout, &dinp, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

static void layernorm_cases(pair_env *e, st_dtype dt, st_dtype gdt) {
  layernorm_at(e, dt, gdt, C);
  layernorm_at(e, dt, gdt, 84);  /* not a multiple of 8 */
  layernorm_at(e, dt, gdt, 768); /* d12's width: each lane owns three groups of 8 */
}

static void case_layernorm(pair_env *e, st_dtype dt) { layernorm_cases(e, dt, dt); }

/* ---- GELU, residual ------------------------------------------------------------------------ */

static void case_gelu(pair_env *e, st_dtype dt) {
  int64_t shape[] = {B, T, 4 * C + 3}; /* odd: exercises the scalar tail */
  pair inp = pair_make(e, dt, 3, shape, -4, 4), out = pair_make(e, dt, 3, shape, 7, 7);
  pair dout = pair_make(e, dt, 3, shape, -1, 1), dinp = pair_make(e, dt, 3, shape, -1, 1);
  CHECK_OK(kernel_gelu_forward(e->cpu, &out.cpu, &inp.cpu, &e->cpu_stream));
  CHECK_OK(kernel_gelu_forward(e->gpu, &out.gpu, &inp.gpu, &e->gpu_stream));
  pair_check(e, ops_label("gelu", "forward", dt), &out);
  CHECK_OK(kernel_gelu_backward(e->cpu, &dinp.cpu, &dout.cpu, &inp.cpu, &e->cpu_stream));
  CHECK_OK(kernel_gelu_backward(e->gpu, &dinp.gpu, &dout.gpu, &inp.gpu, &e->gpu_stream));
  pair_check(e, ops_label("gelu", "backward dinp", dt), &dinp);
  pair *all[] = {&inp, &out, &dout, &dinp};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

static void case_residual(pair_env *e, st_dtype dt) {
  int64_t shape[] = {B, T, C + 1};
  pair a = pair_make(e, dt, 3, shape, -1, 1), b = pair_make(e, dt, 3, shape, -1, 1);
  pair out = pair_make(e, dt, 3, shape, 7, 7);
  CHECK_OK(kernel_residual_forward(e->cpu, &out.cpu, &a.cpu, &b.cpu, &e->cpu_stream));
  CHECK_OK(kernel_residual_forward(e->gpu, &out.gpu, &a.gpu, &b.gpu, &e->gpu_stream));
  pair_check(e, ops_label("residual", "out", dt), &out);
  /* in place: a += b; one rounded add, so bf16 matches the rounded fp32 sum */
  CHECK_OK(kernel_residual_forward(e->gpu, &a.gpu, &a.gpu, &b.gpu, &e->gpu_stream));
  float *got = pair_fetch_new(e, &a);
  double *want = malloc((size_t)a.n * sizeof *want);
  for (int64_t i = 0; i < a.n; i++) {
    float s = a.init[i] + b.init[i];
    uint32_t h = 0;
    if (dt != ST_FP32) dtype_store_f32(&h, dt, 0, s);
    want[i] = dt == ST_FP32 ? s : dtype_load_f32(&h, dt, 0);
  }
  int exact = 1;
  for (int64_t i = 0; i < a.n; i++) exact &= (double)got[i] == want[i];
  CHECK_MSG(exact, "residual: in-place a += b is the correctly rounded sum [%s]", dt_name(dt));
  free(got);
  free(want);
  pair_free(&a);
  pair_free(&b);
  pair_free(&out);
}

/* ---- embedding ----------------------------------------------------------------------------- */

/* dwte and dwpe in gdt (dt, or fp32). */
static void embedding_cases(pair_env *e, st_dtype dt, st_dtype gdt) {
  char op[48];
  snprintf(op, sizeof op, "embedding%s", grads_note(dt, gdt));
  int32_t tokens[ROWS];
  /* half the tokens from a handful of ids, so rows of dwte collect many contributions */
  for (int64_t i = 0; i < ROWS; i++) tokens[i] = i % 2 ? pair_below(e, 5) : pair_below(e, V);
  pair_ids ids = pair_ids_make(e, tokens, ROWS);
  int64_t act[] = {B, T, C}, wte_shape[] = {VP, C}, wpe_shape[] = {MAXT, C};
  pair wte = pair_make(e, dt, 2, wte_shape, -1, 1), wpe = pair_make(e, dt, 2, wpe_shape, -1, 1);
  pair out = pair_make(e, dt, 3, act, 7, 7), dout = pair_make(e, dt, 3, act, -1, 1);
  pair dwte = pair_make(e, gdt, 2, wte_shape, -1, 1), dwpe = pair_make(e, gdt, 2, wpe_shape, -1, 1);
  CHECK_OK(
      kernel_embedding_forward(e->cpu, &out.cpu, ids.host, &wte.cpu, &wpe.cpu, &e->cpu_stream));
  CHECK_OK(kernel_embedding_forward(e->gpu, &out.gpu, ids.dev, &wte.gpu, &wpe.gpu, &e->gpu_stream));
  pair_check(e, ops_label(op, "forward", dt), &out);
  CHECK_OK(
      kernel_embedding_backward(e->cpu, &dwte.cpu, &dwpe.cpu, &dout.cpu, ids.host, &e->cpu_stream));
  float *first[2];
  pair *grads[2] = {&dwte, &dwpe};
  for (int run = 0; run < 2; run++) {
    if (run == 1) {
      pair_reset(e, &dwte);
      pair_reset(e, &dwpe);
    }
    CHECK_OK(kernel_embedding_backward(e->gpu, &dwte.gpu, &dwpe.gpu, &dout.gpu, ids.dev,
                                       &e->gpu_stream));
    for (int g = 0; g < 2; g++) {
      float *got = pair_fetch_new(e, grads[g]);
      if (run == 0) {
        pair_compare_f(ops_label(op, g ? "backward dwpe" : "backward dwte", dt), gdt, got,
                       grads[g]->host, grads[g]->n);
        first[g] = got;
      } else {
        CHECK_MSG(ops_same_bits(first[g], got, grads[g]->n),
                  "%s: backward gradient %d is not bit-identical on a second run [%s]", op, g,
                  dt_name(dt));
        free(got);
        free(first[g]);
      }
    }
  }
  pair *all[] = {&wte, &wpe, &out, &dout, &dwte, &dwpe};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
  pair_ids_free(&ids);
}

static void case_embedding(pair_env *e, st_dtype dt) { embedding_cases(e, dt, dt); }

/* ---- the walk ------------------------------------------------------------------------------ */

typedef void (*op_case)(pair_env *e, st_dtype dt);

static op_case case_for(kernel_op op) {
  switch (op) {
    case KERNEL_OP_MATMUL: return case_matmul;
    case KERNEL_OP_MATMUL_GELU: return case_matmul_gelu;
    case KERNEL_OP_LAYERNORM: return case_layernorm;
    case KERNEL_OP_GELU: return case_gelu;
    case KERNEL_OP_ATTENTION: return ops_case_attention;
    case KERNEL_OP_ATTENTION_CACHED: return ops_case_attention_cached;
    case KERNEL_OP_RESIDUAL: return case_residual;
    case KERNEL_OP_EMBEDDING: return case_embedding;
    case KERNEL_OP_CLASSIFIER: return ops_case_classifier;
    case KERNEL_OP_CAST: return ops_case_cast;
    case KERNEL_OP_ADAMW: return ops_case_adamw;
    case KERNEL_OP_SUM_SQUARES: return ops_case_sum_squares;
    case KERNEL_OP_SUM: return ops_case_sum;
    case KERNEL_OP_SCALE: return ops_case_scale;
    case KERNEL_OP_FINITE_CHECK: return ops_case_finite_check;
    case KERNEL_OP_STEP_FACTORS: return ops_case_step_factors;
    case KERNEL_OP_COUNT: break;
  }
  return NULL;
}

static void run_all(pair_env *e) {
  const st_dtype dtypes[] = {ST_FP32, ST_BF16, ST_FP16};
  for (int op = 0; op < KERNEL_OP_COUNT; op++) {
    CHECK_MSG(kernel_supports(e->gpu, (kernel_op)op, ST_FP32) ||
                  kernel_supports(e->gpu, (kernel_op)op, ST_BF16),
              "the CUDA backend does not run %s", kernel_op_name((kernel_op)op));
    for (int d = 0; d < 3; d++) {
      if (!kernel_supports(e->gpu, (kernel_op)op, dtypes[d])) continue;
      printf("%s [%s]\n", kernel_op_name((kernel_op)op), dt_name(dtypes[d]));
      fflush(stdout);
      e->rng = 1000u * (uint64_t)op + (uint64_t)d;
      case_for((kernel_op)op)(e, dtypes[d]);
    }
  }
}

/* ---- fp32 parameter gradients beside 16-bit activations ------------------------------------ */

typedef void (*grad_case)(pair_env *e, st_dtype dt, st_dtype gdt);

/* The cases of the ops whose backward writes parameter gradients, run with those in gdt. */
static grad_case grad_case_for(kernel_op op) {
  switch (op) {
    case KERNEL_OP_MATMUL: return matmul_cases;
    case KERNEL_OP_MATMUL_GELU: return matmul_gelu_cases;
    case KERNEL_OP_LAYERNORM: return layernorm_cases;
    case KERNEL_OP_EMBEDDING: return embedding_cases;
    default: return NULL;
  }
}

/* The wrappers refuse what the kernels do not write: a gradient in the other 16-bit dtype, and
 * a bias gradient in another dtype than its weight's. */
static void check_grad_refusals(pair_env *e) {
  int64_t act[] = {B, T, C}, wshape[] = {C, C}, bshape[] = {C};
  pair inp = pair_make(e, ST_BF16, 3, act, -1, 1), w = pair_make(e, ST_BF16, 2, wshape, -1, 1);
  pair dout = pair_make(e, ST_BF16, 3, act, -1, 1), dinp = pair_make(e, ST_BF16, 3, act, 0, 0);
  pair dw32 = pair_make(e, ST_FP32, 2, wshape, 0, 0), dw16 = pair_make(e, ST_FP16, 2, wshape, 0, 0);
  pair db16 = pair_make(e, ST_BF16, 1, bshape, 0, 0);
  CHECK_STATUS(kernel_matmul_backward(e->gpu, &dinp.gpu, &dw16.gpu, NULL, &dout.gpu, &inp.gpu,
                                      &w.gpu, &e->gpu_stream),
               ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "dweight is fp16, expected bf16 or fp32"), "detail: %s",
            st_last_error());
  CHECK_STATUS(kernel_matmul_backward(e->gpu, &dinp.gpu, &dw32.gpu, &db16.gpu, &dout.gpu, &inp.gpu,
                                      &w.gpu, &e->gpu_stream),
               ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "dbias is bf16 and dweight is fp32"), "detail: %s",
            st_last_error());
  pair *all[] = {&inp, &w, &dout, &dinp, &dw32, &dw16, &db16};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

/* 1 when every element of p's device side is still `value` (n of them). */
static int still_filled(pair_env *e, const pair *p, float value) {
  float *got = pair_fetch_new(e, p);
  int64_t i = 0;
  while (i < p->n && got[i] == value) i++;
  free(got);
  return i == p->n;
}

/* Sizes the CUDA context's scratch regions cannot take are refused before the op's first
 * launch, leaving every output as it was: a LayerNorm wider than the column-sum region holds
 * (dinp), an embedding backward over more tokens than the sort region holds (dwpe, dwte). */
static void check_size_refusals(pair_env *e) {
  const int64_t wide = (int64_t)(CUDA_COLSUM_FLOATS / 2) + 8, one = 1;
  int64_t row[] = {1, 1, wide};
  pair x = pair_make(e, ST_BF16, 3, row, -1, 1), dout = pair_make(e, ST_BF16, 3, row, -1, 1);
  pair dinp = pair_make(e, ST_BF16, 3, row, 5, 5), w = pair_make(e, ST_BF16, 1, &wide, 1, 1);
  pair dw = pair_make(e, ST_BF16, 1, &wide, 0, 0), db = pair_make(e, ST_BF16, 1, &wide, 0, 0);
  pair mean = pair_make(e, ST_FP32, 1, &one, 0, 0), rstd = pair_make(e, ST_FP32, 1, &one, 1, 1);
  CHECK_STATUS(kernel_layernorm_backward(e->gpu, &dinp.gpu, &dw.gpu, &db.gpu, &dout.gpu, &x.gpu,
                                         &w.gpu, &mean.gpu, &rstd.gpu, &e->gpu_stream),
               ST_ERR_UNSUPPORTED);
  CHECK_MSG(still_filled(e, &dinp, 5.0f),
            "layernorm_backward wrote dinp before refusing %lld channels", (long long)wide);
  pair *ln[] = {&x, &dout, &dinp, &w, &dw, &db, &mean, &rstd};
  for (size_t i = 0; i < sizeof ln / sizeof *ln; i++) pair_free(ln[i]);

  /* 2^20 tokens: three id arrays alone fill 12 MiB of the 8 MiB sort region. */
  const int64_t batch = 1024, seq = 1024, ch = 8, n = batch * seq;
  int32_t *zeros = calloc((size_t)n, sizeof *zeros);
  CHECK(zeros != NULL);
  if (!zeros) return;
  pair_ids ids = pair_ids_make(e, zeros, n);
  free(zeros);
  int64_t act[] = {batch, seq, ch}, wte_shape[] = {VP, ch}, wpe_shape[] = {seq, ch};
  pair dout_tokens = pair_make(e, ST_BF16, 3, act, -1, 1);
  pair dwte = pair_make(e, ST_BF16, 2, wte_shape, 5, 5),
       dwpe = pair_make(e, ST_BF16, 2, wpe_shape, 5, 5);
  CHECK_STATUS(kernel_embedding_backward(e->gpu, &dwte.gpu, &dwpe.gpu, &dout_tokens.gpu, ids.dev,
                                         &e->gpu_stream),
               ST_ERR_UNSUPPORTED);
  CHECK_MSG(still_filled(e, &dwpe, 5.0f) && still_filled(e, &dwte, 5.0f),
            "embedding_backward wrote a gradient before refusing %lld tokens", (long long)n);
  pair *emb[] = {&dout_tokens, &dwte, &dwpe};
  for (size_t i = 0; i < sizeof emb / sizeof *emb; i++) pair_free(emb[i]);
  pair_ids_free(&ids);
}

/* Every op whose backward writes parameter gradients, with bf16 and fp16 activations and fp32
 * parameter gradients (kernel_supports_grad_dtype: bf16 params with fp32 gradient
 * accumulation), against the CPU in fp32 on the rounded inputs. The products of 16-bit values
 * are exact in fp32, so the gradients are held to fp32's tolerance, which a gradient rounded to
 * 16 bits anywhere (2^-9 relative for bf16) fails; the input gradients keep their dtype's. */
static void run_fp32_grads(pair_env *e) {
  const st_dtype dtypes[] = {ST_BF16, ST_FP16};
  for (int op = 0; op < KERNEL_OP_COUNT; op++) {
    const kernel_op o = (kernel_op)op;
    CHECK_MSG(!kernel_supports_grad_dtype(e->gpu, o, ST_BF16, ST_FP32) == !grad_case_for(o),
              "CUDA %s: fp32 parameter gradients beside bf16 activations exactly where the op "
              "writes parameter gradients",
              kernel_op_name(o));
    for (int d = 0; d < 2; d++) {
      if (!kernel_supports_grad_dtype(e->gpu, o, dtypes[d], ST_FP32)) continue;
      printf("%s [%s, fp32 parameter gradients]\n", kernel_op_name(o), dt_name(dtypes[d]));
      fflush(stdout);
      e->rng = 9000u + 10u * (uint64_t)op + (uint64_t)d;
      grad_case_for(o)(e, dtypes[d], ST_FP32);
    }
  }
  check_grad_refusals(e);
  check_size_refusals(e);
}

int main(void) {
  const char *name = "ops_vocab_test";
  for (int op = 0; op < KERNEL_OP_COUNT; op++) {
    CHECK_MSG(case_for((kernel_op)op) != NULL, "op %s has no CUDA test case in %s",
              kernel_op_name((kernel_op)op), __FILE__);
    CHECK_MSG(!kernel_kind_supports_grad_dtype(ST_DEVICE_CUDA, (kernel_op)op, ST_BF16, ST_FP32) ||
                  grad_case_for((kernel_op)op),
              "op %s writes fp32 parameter gradients and has no case for them in %s",
              kernel_op_name((kernel_op)op), __FILE__);
  }
  if (test_checks_failed()) return test_finish(name);
  if (!kernel_has_backend(ST_DEVICE_CUDA)) return test_skip(name, "built without CUDA");
  if (device_cuda_count() == 0) return test_skip(name, "no usable GPU");
  pair_env e = {0};
  e.cpu_dev = device_cpu();
  CHECK_OK(device_select("cuda", 0, &e.gpu_dev));
  CHECK_OK(kernel_backend_create(&e.cpu_dev, &e.cpu));
  /* The simple attention kernels first (the default is cuDNN's): the other kinds come after. */
  CHECK(setenv("ST_CUDA_ATTENTION", "simple", 1) == 0);
  CHECK_OK(kernel_backend_create(&e.gpu_dev, &e.gpu));
  CHECK(unsetenv("ST_CUDA_ATTENTION") == 0);
  CHECK_OK(stream_create(&e.cpu_dev, &e.cpu_stream));
  CHECK_OK(stream_create(&e.gpu_dev, &e.gpu_stream));
  if (test_checks_failed()) return test_finish(name);
  mem_stats before, after;
  mem_stats_get(&before);
  run_all(&e);
  run_fp32_grads(&e);
  ops_run_attention_kind(&e, "flash", 7000u);
  const char *no_cudnn = ops_cudnn_left_out();
  if (no_cudnn) {
    printf("attention (ST_CUDA_ATTENTION=cudnn) left out: %s\n", no_cudnn);
  } else {
    ops_run_attention_kind(&e, "cudnn", 8000u);
  }
  mem_stats_get(&after);
  CHECK_MSG(after.live_blocks == before.live_blocks, "the cases left %llu blocks allocated",
            (unsigned long long)(after.live_blocks - before.live_blocks));
  CHECK_OK(stream_sync(&e.gpu_stream));
  stream_destroy(&e.gpu_stream);
  stream_destroy(&e.cpu_stream);
  kernel_backend_destroy(e.gpu);
  kernel_backend_destroy(e.cpu);
  return test_finish(name);
}
