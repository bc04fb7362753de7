/* matmul_test.c - matmul with and without bias, on odd sizes ([2, 5, 12] @ [12, 7]) and on a
 * shape wider than two of the CPU's column blocks ([2, 1, 130] @ [130, 150]): forward against
 * float64 loops, backward against central differences of those loops, and what the backward
 * does with what its gradients held: dinp overwritten, dweight and dbias accumulated. The
 * tied-head variant (weight stored [out, in], no bias) is checked the same way.
 *
 * Products large enough for the CPU to cut into blocks (kernels/cpu/gemm.c: of rows, or of
 * columns where there are more, the last one short) are checked on 1 to 3 threads, forward and
 * backward, in both weight layouts, against float64 products (a block placed or offset wrongly
 * in any of the products' transposes shows there), and each twice, for the same bits.
 *
 * One shape's forward with its bias at a 256-byte boundary and then 16 bytes past one: on CUDA
 * the two share a cuBLASLt plan, whose heuristic reads the bias's alignment from the pointer it
 * is shown (the emulation keeps that alignment and refuses a call that breaks it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

/* The float64 reference and the loss sum(dout * out) whose gradients the backward computes. */
typedef struct matmul_ref {
  int64_t rows, in, outs;
  int out_in; /* weight stored [outs, in] (the tied head) instead of [in, outs] */
  double *inp, *weight, *bias, *dout; /* bias NULL: no bias */
} matmul_ref;

static void ref_forward(const matmul_ref *r, double *out) {
  for (int64_t n = 0; n < r->rows; n++) {
    for (int64_t o = 0; o < r->outs; o++) {
      double sum = r->bias ? r->bias[o] : 0.0;
      for (int64_t c = 0; c < r->in; c++) {
        double w = r->out_in ? r->weight[o * r->in + c] : r->weight[c * r->outs + o];
        sum += r->inp[n * r->in + c] * w;
      }
      out[n * r->outs + o] = sum;
    }
  }
}

static double ref_loss(void *ctx) {
  const matmul_ref *r = ctx;
  double *out = malloc((size_t)(r->rows * r->outs) * sizeof *out), loss = 0.0;
  ref_forward(r, out);
  for (int64_t i = 0; i < r->rows * r->outs; i++) loss += r->dout[i] * out[i];
  free(out);
  return loss;
}

typedef struct matmul_call {
  test_backend *tb;
  int out_in;
  test_buf *dinp, *dweight, *dbias, *dout, *inp, *weight; /* dbias NULL: no bias */
} matmul_call;

static st_status backward(void *ctx) {
  const matmul_call *m = ctx;
  if (m->out_in) {
    return kernel_matmul_wt_backward(m->tb->kb, &m->dinp->t, &m->dweight->t, &m->dout->t,
                                     &m->inp->t, &m->weight->t, &m->tb->stream);
  }
  return kernel_matmul_backward(m->tb->kb, &m->dinp->t, &m->dweight->t,
                                m->dbias ? &m->dbias->t : NULL, &m->dout->t, &m->inp->t,
                                &m->weight->t, &m->tb->stream);
}

/* A layer of extents d (weight [outs, in] with out_in) with random inputs, weight, bias and
 * dout (from `seed`), uploaded, and out filled with garbage the forward must overwrite; returns
 * its float64 reference (with the bias only when with_bias). */
static matmul_ref layer_make(test_backend *tb, test_linear *l, test_linear_dims d, int with_bias,
                             int out_in, uint64_t seed) {
  test_rng rng = {seed};
  const int64_t rows = d.batch * d.seq;
  *l = tlinear_alloc(tb, d, out_in);
  rng_fill(&rng, l->inp.host, rows * d.in, -1.0, 1.0);
  rng_fill(&rng, l->weight.host, d.in * d.outs, -1.0, 1.0);
  rng_fill(&rng, l->bias.host, d.outs, -1.0, 1.0);
  rng_fill(&rng, l->dout.host, rows * d.outs, -1.0, 1.0);
  rng_fill(&rng, l->out.host, rows * d.outs, 5.0, 9.0);
  test_buf *inputs[] = {&l->inp, &l->weight, &l->bias, &l->dout, &l->out};
  for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) tbuf_upload(inputs[i]);
  return (matmul_ref){rows,
                      d.in,
                      d.outs,
                      out_in,
                      to_f64(l->inp.host, rows * d.in),
                      to_f64(l->weight.host, d.in * d.outs),
                      with_bias ? to_f64(l->bias.host, d.outs) : NULL,
                      to_f64(l->dout.host, rows * d.outs)};
}

static void ref_free(matmul_ref *ref) {
  free(ref->inp);
  free(ref->weight);
  free(ref->bias);
  free(ref->dout);
}

/* out_in: the tied-head variant (weight [outs, in], never a bias). */
static void check_matmul(test_backend *tb, test_linear_dims d, int with_bias, int out_in) {
  test_linear l;
  matmul_ref ref =
      layer_make(tb, &l, d, with_bias, out_in, (uint64_t)(d.in * 2 + with_bias + 4 * out_in));
  const int64_t rows = ref.rows;
  double *want = malloc((size_t)(rows * d.outs) * sizeof *want);
  ref_forward(&ref, want);
  if (out_in) {
    CHECK_OK(kernel_matmul_wt_forward(tb->kb, &l.out.t, &l.inp.t, &l.weight.t, &tb->stream));
  } else {
    CHECK_OK(kernel_matmul_forward(tb->kb, &l.out.t, &l.inp.t, &l.weight.t,
                                   with_bias ? &l.bias.t : NULL, &tb->stream));
  }
  tbuf_download(&l.out);
  check_close(out_in      ? "matmul forward, tied head"
              : with_bias ? "matmul forward"
                          : "matmul forward, no bias",
              l.out.host, want, rows * d.outs, TOL_FP32);

  matmul_call call = {tb,      out_in, &l.dinp,  &l.dweight, with_bias ? &l.dbias : NULL,
                      &l.dout, &l.inp, &l.weight};
  test_buf *grads[] = {&l.dinp, &l.dweight, &l.dbias};
  check_accumulates("matmul backward", grads, with_bias ? 3 : 2, 1, backward, &call); /* dinp */
  check_gradient("matmul dinp", ref.inp, rows * d.in, l.dinp.host, ref_loss, &ref);
  check_gradient("matmul dweight", ref.weight, d.in * d.outs, l.dweight.host, ref_loss, &ref);
  if (with_bias) check_gradient("matmul dbias", ref.bias, d.outs, l.dbias.host, ref_loss, &ref);

  free(want);
  ref_free(&ref);
  tlinear_free(&l);
}

/* grad = the float64 gradients of sum(dout * out) for r: dinp[rows, in], dweight in r's layout. */
static void ref_backward(const matmul_ref *r, double *dinp, double *dweight) {
  for (int64_t n = 0; n < r->rows; n++) {
    for (int64_t c = 0; c < r->in; c++) {
      double sum = 0.0;
      for (int64_t o = 0; o < r->outs; o++) {
        double w = r->out_in ? r->weight[o * r->in + c] : r->weight[c * r->outs + o];
        sum += r->dout[n * r->outs + o] * w;
      }
      dinp[n * r->in + c] = sum;
    }
  }
  for (int64_t c = 0; c < r->in; c++) {
    for (int64_t o = 0; o < r->outs; o++) {
      double sum = 0.0;
      for (int64_t n = 0; n < r->rows; n++) sum += r->inp[n * r->in + c] * r->dout[n * r->outs + o];
      dweight[r->out_in ? o * r->in + c : c * r->outs + o] = sum;
    }
  }
}

/* The outputs of a check_cut run, which the same run again must equal bit for bit. */
typedef struct cut_bits {
  float *out, *dinp, *dweight;
} cut_bits;

/* One layer large enough to be cut, on `threads` threads: forward and backward (from zeroed
 * gradients) against ref_forward and ref_backward; the outputs are kept in *one when it holds
 * none, else they must equal those. */
static void check_cut(test_backend *tb, test_linear_dims d, int out_in, int threads,
                      cut_bits *one) {
  CHECK_EQ_INT(test_set_threads(threads), threads);
  test_linear l;
  matmul_ref ref = layer_make(tb, &l, d, !out_in, out_in, (uint64_t)(d.in + 3 * d.outs + out_in));
  const int64_t rows = ref.rows;
  double *want_out = malloc((size_t)(rows * d.outs) * sizeof *want_out);
  double *want_dinp = malloc((size_t)(rows * d.in) * sizeof *want_dinp);
  double *want_dweight = malloc((size_t)(d.in * d.outs) * sizeof *want_dweight);
  ref_forward(&ref, want_out);
  ref_backward(&ref, want_dinp, want_dweight);

  if (out_in) {
    CHECK_OK(kernel_matmul_wt_forward(tb->kb, &l.out.t, &l.inp.t, &l.weight.t, &tb->stream));
  } else {
    CHECK_OK(
        kernel_matmul_forward(tb->kb, &l.out.t, &l.inp.t, &l.weight.t, &l.bias.t, &tb->stream));
  }
  matmul_call call = {tb,      out_in, &l.dinp,  &l.dweight, out_in ? NULL : &l.dbias,
                      &l.dout, &l.inp, &l.weight};
  CHECK_OK(backward(&call));
  tbuf_download(&l.out);
  tbuf_download(&l.dinp);
  tbuf_download(&l.dweight);
  char what[120];
  snprintf(what, sizeof what, "[%lld, %lld] @ %s [%lld, %lld] on %d threads: ", (long long)rows,
           (long long)d.in, out_in ? "tied" : "", (long long)d.in, (long long)d.outs, threads);
  const size_t at = strlen(what);
  snprintf(what + at, sizeof what - at, "forward");
  check_close(what, l.out.host, want_out, rows * d.outs, TOL_FP32);
  snprintf(what + at, sizeof what - at, "dinp");
  check_close(what, l.dinp.host, want_dinp, rows * d.in, TOL_FP32);
  snprintf(what + at, sizeof what - at, "dweight");
  check_close(what, l.dweight.host, want_dweight, d.in * d.outs, TOL_FP32);
  const size_t sizes[3] = {(size_t)(rows * d.outs), (size_t)(rows * d.in), (size_t)(d.in * d.outs)};
  float *got[3] = {l.out.host, l.dinp.host, l.dweight.host};
  float **kept[3] = {&one->out, &one->dinp, &one->dweight};
  static const char *const names[3] = {"forward", "dinp", "dweight"};
  what[at] = '\0';
  for (int i = 0; i < 3; i++) {
    if (!*kept[i]) {
      *kept[i] = malloc(sizes[i] * sizeof(float));
      memcpy(*kept[i], got[i], sizes[i] * sizeof(float));
    } else {
      CHECK_MSG(memcmp(*kept[i], got[i], sizes[i] * sizeof(float)) == 0,
                "%s%s: not the bits of the same run before", what, names[i]);
    }
  }

  free(want_out);
  free(want_dinp);
  free(want_dweight);
  ref_free(&ref);
  tlinear_free(&l);
  test_set_threads(1);
}

/* The forward of one shape with the bias at `offset` floats into its buffer (the buffer itself
 * at a 256-byte boundary), against ref_forward. */
static void check_bias_at(test_backend *tb, int64_t offset) {
  const test_linear_dims d = {2, 4, 24, 32};
  test_linear l;
  matmul_ref ref = layer_make(tb, &l, d, 0, 0, (uint64_t)(11 + offset));
  const int64_t padded_shape[1] = {d.outs + offset};
  test_buf padded = tbuf_tensor(tb, ST_FP32, 1, padded_shape);
  test_rng rng = {(uint64_t)(17 + offset)};
  rng_fill(&rng, padded.host, d.outs + offset, -1.0, 1.0);
  tbuf_upload(&padded);
  st_tensor bias = l.bias.t; /* shape [outs], data inside `padded` */
  bias.data = (float *)padded.device + offset;
  ref.bias = to_f64((float *)padded.host + offset, d.outs);
  double *want = malloc((size_t)(ref.rows * d.outs) * sizeof *want);
  ref_forward(&ref, want);
  CHECK_OK(kernel_matmul_forward(tb->kb, &l.out.t, &l.inp.t, &l.weight.t, &bias, &tb->stream));
  tbuf_download(&l.out);
  char what[80];
  snprintf(what, sizeof what, "matmul forward, bias %lld bytes past a 256-byte boundary",
           (long long)(offset * 4));
  check_close(what, l.out.host, want, ref.rows * d.outs, TOL_FP32);
  free(want);
  ref_free(&ref);
  tbuf_free(&padded);
  tlinear_free(&l);
}

static void body(test_backend *tb) {
  const test_linear_dims odd = {2, 5, 12, 7}, wide = {2, 1, 130, 150};
  check_matmul(tb, odd, 1, 0);
  check_matmul(tb, odd, 0, 0);
  check_matmul(tb, wide, 1, 0);
  check_matmul(tb, odd, 0, 1);
  check_matmul(tb, wide, 0, 1);
  check_bias_at(tb, 0);
  check_bias_at(tb, 4);
  /* More rows than features, and fewer: each product of either is cut by rows or by columns, the
   * last block short (111, 70, 90, 20, 100, 200, 312, 210 and 13 are no multiples of 16). */
  const test_linear_dims shapes[3] = {{3, 37, 70, 90}, {1, 20, 100, 200}, {1, 312, 210, 13}};
  for (int threads = 1; threads <= 4; threads++) {
    for (int s = 0; s < 3; s++) {
      for (int out_in = 0; out_in <= 1; out_in++) {
        cut_bits one = {0};
        check_cut(tb, shapes[s], out_in, threads, &one);
        check_cut(tb, shapes[s], out_in, threads, &one);
        free(one.out);
        free(one.dinp);
        free(one.dweight);
      }
    }
  }
}

int main(void) { return test_on_backends("matmul_test", body); }
