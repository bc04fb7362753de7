/* classifier.c - the fused classifier on the CPU: softmax cross-entropy over a padded
 * vocabulary and its gradient in one pass over each row.
 *
 * Logits rows are Vp wide but only the first `vocab` columns are real; the padding never enters
 * the softmax and gets a zero gradient. No probabilities are kept: each row's max and
 * normaliser serve its loss and then its gradient, written in place of the logits when the
 * caller asks. Parallel over rows. */
#include <math.h>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

/* The max of row[0..vocab) and sum of exp(row - max): softmax = exp(row - max) / sum, with no
 * overflow. */
static void softmax_stats(const float *row, int64_t vocab, float *max, float *sum) {
  float m = row[0];
  for (int64_t v = 1; v < vocab; v++) m = row[v] > m ? row[v] : m;
  float s = 0.0f;
  for (int64_t v = 0; v < vocab; v++) s += expf(row[v] - m);
  *max = m;
  *sum = s;
}

st_status kernel_cpu_classifier(void *ctx, const st_tensor *losses, const st_tensor *dlogits,
                                const st_tensor *logits, const int32_t *targets, int64_t vocab,
                                float dloss_scale, const st_stream *stream) {
  (void)ctx;
  (void)stream;
  int64_t rows = kernel_rows(logits), padded = kernel_cols(logits);
  ST_CHECK(kernel_cpu_check_ids("target", targets, rows, vocab));
  float *loss = losses->data;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; n++) {
    /* The loss reads the row before the gradient overwrites it, and element v of the gradient
     * is written after it is read, which makes dlogits == logits safe. */
    const float *row = (const float *)logits->data + n * padded;
    float max, sum;
    softmax_stats(row, vocab, &max, &sum);
    loss[n] = logf(sum) + max - row[targets[n]];
    if (!dlogits) continue;
    float *grad = (float *)dlogits->data + n * padded;
    for (int64_t v = 0; v < vocab; v++) {
      float p = expf(row[v] - max) / sum;
      grad[v] = (p - (v == targets[n] ? 1.0f : 0.0f)) * dloss_scale;
    }
    for (int64_t v = vocab; v < padded; v++) grad[v] = 0.0f;
  }
  return ST_OK;
}
