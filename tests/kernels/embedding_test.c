/* embedding_test.c - token + position embedding with repeated tokens, on odd sizes (B=2, T=5,
 * C=12, a vocabulary of 37 rows padded to 40, 8 positions) and wider than two of the CPU's
 * column blocks (C=130): forward against float64 sums, backward (dwte, dwpe) against central
 * differences, its accumulation, and bit-identical gradients with 1 and 2 OpenMP threads. */
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

/* Sizes: out [batch, seq, channels], wte [padded, channels] of which `vocab` rows are real
 * tokens, wpe [positions, channels]. */
typedef struct embedding_dims {
  int64_t batch, seq, channels, vocab, padded, positions;
} embedding_dims;

typedef struct embedding_ref {
  embedding_dims d;
  double *wte, *wpe, *dout;
  const int32_t *tokens;
} embedding_ref;

static void ref_forward(const embedding_ref *r, double *out) {
  int64_t C = r->d.channels;
  for (int64_t row = 0; row < r->d.batch * r->d.seq; row++) {
    for (int64_t c = 0; c < C; c++) {
      out[row * C + c] = r->wte[r->tokens[row] * C + c] + r->wpe[row % r->d.seq * C + c];
    }
  }
}

static double ref_loss(void *ctx) {
  const embedding_ref *r = ctx;
  int64_t count = r->d.batch * r->d.seq * r->d.channels;
  double *out = malloc((size_t)count * sizeof *out), loss = 0.0;
  ref_forward(r, out);
  for (int64_t i = 0; i < count; i++) loss += r->dout[i] * out[i];
  free(out);
  return loss;
}

typedef struct embedding_call {
  test_backend *tb;
  test_buf *dwte, *dwpe, *dout, *tokens;
} embedding_call;

static st_status backward(void *ctx) {
  const embedding_call *e = ctx;
  return kernel_embedding_backward(e->tb->kb, &e->dwte->t, &e->dwpe->t, &e->dout->t,
                                   e->tokens->device, &e->tb->stream);
}

static void check_values_and_gradients(test_backend *tb, embedding_dims d) {
  test_rng rng = {(uint64_t)d.channels};
  int64_t rows = d.batch * d.seq, count = rows * d.channels;
  int64_t act[] = {d.batch, d.seq, d.channels}, wte_shape[] = {d.padded, d.channels};
  int64_t wpe_shape[] = {d.positions, d.channels};
  test_buf out = tbuf_tensor(tb, ST_FP32, 3, act), dout = tbuf_tensor(tb, ST_FP32, 3, act);
  test_buf wte = tbuf_tensor(tb, ST_FP32, 2, wte_shape);
  test_buf dwte = tbuf_tensor(tb, ST_FP32, 2, wte_shape);
  test_buf wpe = tbuf_tensor(tb, ST_FP32, 2, wpe_shape);
  test_buf dwpe = tbuf_tensor(tb, ST_FP32, 2, wpe_shape);
  test_buf tokens = tbuf_ids(tb, rows);
  int32_t *tok = tokens.host;
  for (int64_t r = 0; r < rows; r++) tok[r] = rng_below(&rng, (int32_t)d.vocab);
  tok[1] = (int32_t)d.vocab - 1; /* the last real row */
  tok[rows - 1] = tok[0];        /* the same token twice: its gradient rows must add up */
  rng_fill(&rng, wte.host, d.padded * d.channels, -1.0, 1.0);
  rng_fill(&rng, wpe.host, d.positions * d.channels, -1.0, 1.0);
  rng_fill(&rng, dout.host, count, -1.0, 1.0);
  test_buf *inputs[] = {&tokens, &wte, &wpe, &dout};
  for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) tbuf_upload(inputs[i]);

  embedding_ref ref = {d, to_f64(wte.host, d.padded * d.channels),
                       to_f64(wpe.host, d.positions * d.channels), to_f64(dout.host, count), tok};
  double *want = malloc((size_t)count * sizeof *want);
  ref_forward(&ref, want);
  CHECK_OK(kernel_embedding_forward(tb->kb, &out.t, tokens.device, &wte.t, &wpe.t, &tb->stream));
  tbuf_download(&out);
  check_close("embedding forward", out.host, want, count, TOL_FP32);

  embedding_call call = {tb, &dwte, &dwpe, &dout, &tokens};
  test_buf *grads[] = {&dwte, &dwpe};
  check_accumulates("embedding backward", grads, 2, 0, backward, &call);
  check_gradient("embedding dwte", ref.wte, d.padded * d.channels, dwte.host, ref_loss, &ref);
  check_gradient("embedding dwpe", ref.wpe, d.positions * d.channels, dwpe.host, ref_loss, &ref);

  free(want);
  free(ref.wte);
  free(ref.wpe);
  free(ref.dout);
  test_buf *all[] = {&tokens, &dwpe, &wpe, &dwte, &wte, &dout, &out};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tbuf_free(all[i]);
}

/* The backward from the same starting gradients with 1 and then 2 threads: the results must
 * be the same bits. 16 tokens over 1024 rows repeat each token ~64 times. */
static void check_thread_count_independent(test_backend *tb) {
  enum { WB = 8, WT = 128, WC = 200, WV = 16, WROWS = WB * WT };
  test_rng rng = {62};
  test_buf dout = tbuf_tensor(tb, ST_FP32, 3, (int64_t[]){WB, WT, WC});
  test_buf dwte = tbuf_tensor(tb, ST_FP32, 2, (int64_t[]){WV, WC});
  test_buf dwpe = tbuf_tensor(tb, ST_FP32, 2, (int64_t[]){WT, WC});
  test_buf tokens = tbuf_ids(tb, WROWS);
  int32_t *tok = tokens.host;
  for (int r = 0; r < WROWS; r++) tok[r] = rng_below(&rng, WV);
  rng_fill(&rng, dout.host, WROWS * WC, -1.0, 1.0);
  tbuf_upload(&tokens);
  tbuf_upload(&dout);
  float *start_wte = malloc(dwte.bytes), *start_wpe = malloc(dwpe.bytes);
  rng_fill(&rng, start_wte, WV * WC, -1.0, 1.0);
  rng_fill(&rng, start_wpe, WT * WC, -1.0, 1.0);

  float *results[2][2];
  for (int threads = 1; threads <= 2; threads++) {
    CHECK_EQ_INT(test_set_threads(threads), threads);
    memcpy(dwte.host, start_wte, dwte.bytes);
    memcpy(dwpe.host, start_wpe, dwpe.bytes);
    tbuf_upload(&dwte);
    tbuf_upload(&dwpe);
    CHECK_OK(
        kernel_embedding_backward(tb->kb, &dwte.t, &dwpe.t, &dout.t, tokens.device, &tb->stream));
    tbuf_download(&dwte);
    tbuf_download(&dwpe);
    results[threads - 1][0] = malloc(dwte.bytes);
    results[threads - 1][1] = malloc(dwpe.bytes);
    memcpy(results[threads - 1][0], dwte.host, dwte.bytes);
    memcpy(results[threads - 1][1], dwpe.host, dwpe.bytes);
  }
  test_set_threads(1);
  CHECK_MSG(memcmp(results[0][0], results[1][0], dwte.bytes) == 0,
            "embedding dwte is bit-identical with 1 and 2 threads");
  CHECK_MSG(memcmp(results[0][1], results[1][1], dwpe.bytes) == 0,
            "embedding dwpe is bit-identical with 1 and 2 threads");

  for (int i = 0; i < 2; i++) {
    free(results[i][0]);
    free(results[i][1]);
  }
  free(start_wpe);
  free(start_wte);
  tbuf_free(&tokens);
  tbuf_free(&dwpe);
  tbuf_free(&dwte);
  tbuf_free(&dout);
}

static void body(test_backend *tb) {
  const embedding_dims odd = {2, 5, 12, 37, 40, 8}, wide = {2, 3, 130, 5, 8, 4};
  check_values_and_gradients(tb, odd);
  check_values_and_gradients(tb, wide);
  check_thread_count_independent(tb);
}

int main(void) { return test_on_backends("embedding_test", body); }
