/* ops_vocab_classifier.c - ops_vocab_test's classifier cases: the losses and dlogits (separate,
 * and in place of the logits) against the CPU backend at the vocabulary's 251 padded to 256, at a
 * padded width that is not a multiple of 8 (the element-by-element path) and at GPT-2's 50257
 * padded to 50304; and NaN logits giving a NaN loss. ops_vocab_test.c's header states the
 * tolerances. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/ops_pair.h"
#include "tests/testing.h"

/* The classifier over `rows` rows of logits `padded` wide, the first `vocab` real. */
static void classifier_at(pair_env *e, st_dtype dt, int64_t rows, int64_t vocab, int64_t padded) {
  const char *op = vocab > 512 ? "classifier (GPT-2 vocabulary)" : "classifier";
  int32_t *targets = malloc((size_t)rows * sizeof *targets);
  for (int64_t i = 0; i < rows; i++) targets[i] = pair_below(e, (int32_t)vocab);
  pair_ids ids = pair_ids_make(e, targets, rows);
  free(targets);
  int64_t shape[] = {rows, padded};
  pair logits = pair_make(e, dt, 2, shape, -4, 4), dlogits = pair_make(e, dt, 2, shape, 7, 7);
  /* padding columns hold large values the softmax must ignore */
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t v = vocab; v < padded; v++) logits.init[r * padded + v] = 50.0f;
  }
  pair_reset(e, &logits);
  pair losses = pair_make(e, ST_FP32, 1, &rows, 7, 7);
  const float scale = 1.0f / (float)rows;
  CHECK_OK(kernel_classifier(e->cpu, &losses.cpu, &dlogits.cpu, &logits.cpu, ids.host, vocab, scale,
                             &e->cpu_stream));
  CHECK_OK(kernel_classifier(e->gpu, &losses.gpu, &dlogits.gpu, &logits.gpu, ids.dev, vocab, scale,
                             &e->gpu_stream));
  pair_check(e, ops_label(op, "losses", dt), &losses);
  pair_check(e, ops_label(op, "dlogits (padding 0)", dt), &dlogits);
  /* losses only (evaluation), then dlogits in place of the logits */
  /* resetting the device side puts the initial values back on the host side too: keep the
   * CPU's losses there */
  float *cpu_losses = malloc((size_t)losses.n * sizeof *cpu_losses);
  memcpy(cpu_losses, losses.host, (size_t)losses.n * sizeof *cpu_losses);
  pair_reset(e, &losses);
  memcpy(losses.host, cpu_losses, (size_t)losses.n * sizeof *cpu_losses);
  free(cpu_losses);
  CHECK_OK(kernel_classifier(e->gpu, &losses.gpu, NULL, &logits.gpu, ids.dev, vocab, scale,
                             &e->gpu_stream));
  pair_check(e, ops_label(op, "losses without dlogits", dt), &losses);
  CHECK_OK(kernel_classifier(e->gpu, &losses.gpu, &logits.gpu, &logits.gpu, ids.dev, vocab, scale,
                             &e->gpu_stream));
  float *got = pair_fetch_new(e, &logits);
  pair_compare_f(ops_label(op, "dlogits in place of logits", dt), dt, got, dlogits.host, logits.n);
  free(got);
  pair_check(e, ops_label(op, "losses with dlogits in place", dt), &losses);
  pair_free(&logits);
  pair_free(&dlogits);
  pair_free(&losses);
  pair_ids_free(&ids);
}

/* A row whose first 8 logits (one thread's first 16-byte pack) are NaN has a NaN loss, as on
 * the CPU, and the row after it a finite one: the running max passes NaN over, so the kernel
 * must see it. */
static void classifier_nan(pair_env *e, st_dtype dt) {
  const int32_t targets[2] = {3, 5};
  pair_ids ids = pair_ids_make(e, targets, 2);
  int64_t shape[] = {2, OPS_VP}, rows = 2;
  pair logits = pair_make(e, dt, 2, shape, -4, 4), losses = pair_make(e, ST_FP32, 1, &rows, 7, 7);
  for (int v = 0; v < 8; v++) logits.init[v] = NAN;
  pair_reset(e, &logits);
  CHECK_OK(kernel_classifier(e->gpu, &losses.gpu, NULL, &logits.gpu, ids.dev, OPS_V, 1.0f,
                             &e->gpu_stream));
  float *got = pair_fetch_new(e, &losses);
  CHECK_MSG(
      isnan(got[0]) && isfinite(got[1]),
      "classifier [%s]: NaN logits give a NaN loss (got %g) and leave the next row's (got %g)",
      dtype_name(dt), got[0], got[1]);
  free(got);
  pair_free(&logits);
  pair_free(&losses);
  pair_ids_free(&ids);
}

void ops_case_classifier(pair_env *e, st_dtype dt) {
  const int64_t rows = (int64_t)OPS_B * OPS_T;
  classifier_at(e, dt, rows, OPS_V, OPS_VP);
  classifier_at(e, dt, rows, OPS_V, 253); /* padded to no multiple of 8: element by element */
  /* d12's padded GPT-2 vocabulary: each of the 512 threads strides a row ~100 times */
  classifier_at(e, dt, 5, 50257, 50304);
  classifier_nan(e, dt);
}
