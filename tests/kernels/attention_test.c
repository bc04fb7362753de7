/* attention_test.c - causal self-attention with B=2, T=5, C=12, NH=3 (head size 4): forward
 * (out and probs, zero above the diagonal) against float64 loops written from the definition,
 * backward (dqkv) against central differences of those loops, and that it overwrites; the forward
 * again on more threads than heads. */
#include <math.h>
#include <stdlib.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

enum { B = 2, T = 5, C = 12, NH = 3, HS = C / NH, QKV = B * T * 3 * C, OUT = B * T * C };
enum { PROBS = B * NH * T * T };

typedef struct attention_ref {
  double *qkv, *dout;
} attention_ref;

/* q, k, v of head h at (b, t), feature i: Hugging Face GPT-2's c_attn split. */
static double ref_qkv(const double *qkv, int part, int b, int t, int h, int i) {
  return qkv[((b * T + t) * 3 + part) * C + h * HS + i];
}

static void ref_forward(const attention_ref *r, double *out, double *probs) {
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        double *p = probs + ((b * NH + h) * T + t) * T, max = -INFINITY, sum = 0.0;
        for (int u = 0; u < T; u++) {
          double score = 0.0;
          for (int i = 0; i < HS; i++)
            score += ref_qkv(r->qkv, 0, b, t, h, i) * ref_qkv(r->qkv, 1, b, u, h, i);
          p[u] = u <= t ? score / sqrt((double)HS) : -INFINITY;
          max = fmax(max, p[u]);
        }
        for (int u = 0; u < T; u++) sum += (p[u] = exp(p[u] - max));
        for (int u = 0; u < T; u++) p[u] /= sum;
        for (int i = 0; i < HS; i++) {
          double y = 0.0;
          for (int u = 0; u < T; u++) y += p[u] * ref_qkv(r->qkv, 2, b, u, h, i);
          out[(b * T + t) * C + h * HS + i] = y;
        }
      }
    }
  }
}

static double ref_loss(void *ctx) {
  const attention_ref *r = ctx;
  double out[OUT], probs[PROBS], loss = 0.0;
  ref_forward(r, out, probs);
  for (int i = 0; i < OUT; i++) loss += r->dout[i] * out[i];
  return loss;
}

typedef struct attention_call {
  test_backend *tb;
  test_buf *dqkv, *dout, *qkv, *out, *state;
} attention_call;

static st_status backward(void *ctx) {
  const attention_call *a = ctx;
  return kernel_attention_backward(a->tb->kb, &a->dqkv->t, &a->dout->t, &a->qkv->t, &a->out->t,
                                   &a->state->t, NH, &a->tb->stream);
}

static void body(test_backend *tb) {
  test_rng rng = {51};
  int64_t qkv_shape[] = {B, T, 3 * C}, out_shape[] = {B, T, C};
  int64_t state_numel = kernel_attention_state_numel(tb->kb, B, NH, T);
  test_buf qkv = tbuf_tensor(tb, ST_FP32, 3, qkv_shape);
  test_buf dqkv = tbuf_tensor(tb, ST_FP32, 3, qkv_shape);
  test_buf out = tbuf_tensor(tb, ST_FP32, 3, out_shape);
  test_buf dout = tbuf_tensor(tb, ST_FP32, 3, out_shape);
  test_buf state = tbuf_tensor(tb, ST_FP32, 1, &state_numel);
  /* Values up to 2 make some softmax rows peaked, others flat. */
  rng_fill(&rng, qkv.host, QKV, -2.0, 2.0);
  rng_fill(&rng, dout.host, OUT, -1.0, 1.0);
  rng_fill(&rng, state.host, state_numel, 5.0, 9.0); /* garbage the forward must overwrite */
  tbuf_upload(&qkv);
  tbuf_upload(&dout);
  tbuf_upload(&state);

  attention_ref ref = {to_f64(qkv.host, QKV), to_f64(dout.host, OUT)};
  double want[OUT], want_probs[PROBS];
  ref_forward(&ref, want, want_probs);
  CHECK_OK(kernel_attention_forward(tb->kb, &out.t, &state.t, &qkv.t, NH, &tb->stream));
  tbuf_download(&out);
  tbuf_download(&state);
  check_close("attention out", out.host, want, OUT, TOL_FP32);
  if (state_numel == PROBS) { /* a backend that keeps the probabilities as its state */
    check_close("attention probs", state.host, want_probs, PROBS, TOL_FP32);
    int masked_zero = 1;
    const float *p = state.host;
    for (int i = 0; i < PROBS; i++) {
      int query = i / T % T, key = i % T;
      if (key > query && p[i] != 0.0f) masked_zero = 0;
    }
    CHECK_MSG(masked_zero, "attention probs above the diagonal are exactly 0");
  }

  attention_call call = {tb, &dqkv, &dout, &qkv, &out, &state};
  test_buf *grads[] = {&dqkv};
  check_accumulates("attention backward", grads, 1, 1, backward, &call); /* dqkv written */
  check_gradient("attention dqkv", ref.qkv, QKV, dqkv.host, ref_loss, &ref);

  /* More threads than the B x NH heads: the CPU runs them one after another, each product cut
   * across the threads (kernels/cpu/attention.c), to the same values. */
  CHECK_EQ_INT(test_set_threads(B * NH + 1), B * NH + 1);
  rng_fill(&rng, out.host, OUT, 5.0, 9.0);
  tbuf_upload(&out);
  CHECK_OK(kernel_attention_forward(tb->kb, &out.t, &state.t, &qkv.t, NH, &tb->stream));
  tbuf_download(&out);
  check_close("attention out, more threads than heads", out.host, want, OUT, TOL_FP32);
  test_set_threads(1);

  free(ref.qkv);
  free(ref.dout);
  test_buf *all[] = {&state, &dout, &out, &dqkv, &qkv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tbuf_free(all[i]);
}

int main(void) { return test_on_backends("attention_test", body); }
