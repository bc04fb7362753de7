/* classifier_test.c - the fused classifier (softmax cross-entropy and dlogits) over 37 real
 * columns of logits padded to 40, for [2, 5] tokens. The padding holds large logits that would
 * dominate the softmax if they leaked in. Checks: losses against float64 loops, alone and with
 * the gradient; dlogits against central differences of dloss_scale * sum(losses), exactly 0 in
 * the padding, overwritten rather than accumulated, and the same bits and losses when dlogits
 * aliases logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

enum { B = 2, T = 5, N = B * T, V = 37, VP = 40 };

static const float DLOSS_SCALE = 1.0f / N;

typedef struct crossentropy_ref {
  double *logits;
  const int32_t *targets;
} crossentropy_ref;

static void ref_losses(const crossentropy_ref *r, double *losses) {
  for (int n = 0; n < N; n++) {
    const double *row = r->logits + n * VP;
    double max = row[0], sum = 0.0;
    for (int v = 1; v < V; v++) max = fmax(max, row[v]);
    for (int v = 0; v < V; v++) sum += exp(row[v] - max);
    losses[n] = max + log(sum) - row[r->targets[n]];
  }
}

static double ref_loss(void *ctx) {
  double losses[N], total = 0.0;
  ref_losses(ctx, losses);
  for (int n = 0; n < N; n++) total += losses[n];
  return DLOSS_SCALE * total;
}

static void body(test_backend *tb) {
  test_rng rng = {71};
  int64_t logits_shape[] = {B, T, VP}, losses_shape[] = {B, T};
  test_buf logits = tbuf_tensor(tb, ST_FP32, 3, logits_shape);
  test_buf dlogits = tbuf_tensor(tb, ST_FP32, 3, logits_shape);
  test_buf losses = tbuf_tensor(tb, ST_FP32, 2, losses_shape);
  test_buf targets = tbuf_ids(tb, N);
  float *x = logits.host;
  int32_t *tgt = targets.host;
  for (int n = 0; n < N; n++) {
    rng_fill(&rng, x + n * VP, V, -3.0, 3.0);
    for (int v = V; v < VP; v++) x[n * VP + v] = 50.0f;
    tgt[n] = rng_below(&rng, V);
  }
  tgt[0] = 0;
  tgt[1] = V - 1;
  tbuf_upload(&logits);
  tbuf_upload(&targets);

  crossentropy_ref ref = {to_f64(x, N * VP), tgt};
  double want[N];
  ref_losses(&ref, want);
  CHECK_OK(kernel_classifier(tb->kb, &losses.t, NULL, &logits.t, targets.device, V, DLOSS_SCALE,
                             &tb->stream));
  tbuf_download(&losses);
  check_close("classifier losses", losses.host, want, N, TOL_FP32);

  /* Garbage in dlogits, twice over: an op that accumulated would not match the gradient. */
  rng_fill(&rng, dlogits.host, N * VP, 5.0, 9.0);
  tbuf_upload(&dlogits);
  for (int call = 0; call < 2; call++) {
    tbuf_zero(&losses);
    CHECK_OK(kernel_classifier(tb->kb, &losses.t, &dlogits.t, &logits.t, targets.device, V,
                               DLOSS_SCALE, &tb->stream));
  }
  tbuf_download(&losses);
  check_close("classifier losses with the gradient", losses.host, want, N, TOL_FP32);
  tbuf_download(&dlogits);
  check_gradient("classifier dlogits", ref.logits, N * VP, dlogits.host, ref_loss, &ref);
  const float *g = dlogits.host;
  int padding_zero = 1;
  for (int n = 0; n < N; n++) {
    for (int v = V; v < VP; v++) padding_zero &= g[n * VP + v] == 0.0f;
  }
  CHECK_MSG(padding_zero, "classifier dlogits is exactly 0 in the padding columns");

  tbuf_zero(&losses);
  CHECK_OK(kernel_classifier(tb->kb, &losses.t, &logits.t, &logits.t, targets.device, V,
                             DLOSS_SCALE, &tb->stream));
  tbuf_download(&logits);
  CHECK_MSG(memcmp(logits.host, dlogits.host, logits.bytes) == 0,
            "classifier in place gives the same bits");
  tbuf_download(&losses);
  check_close("classifier losses in place", losses.host, want, N, TOL_FP32);

  free(ref.logits);
  tbuf_free(&targets);
  tbuf_free(&losses);
  tbuf_free(&dlogits);
  tbuf_free(&logits);
}

int main(void) { return test_on_backends("classifier_test", body); }
