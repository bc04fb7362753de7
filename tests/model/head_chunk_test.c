/* head_chunk_test.c - the LM head computed a chunk of rows at a time (gpt_head.c), on a small
 * GPT of one block (n_embd 32, vocabulary 200 padded to 256, 2 x 10 tokens, wide weights) on
 * one CPU rank, its head forced into three uneven chunks of 7, 7 and 6 rows:
 *   - after the training forward: the per-token losses, d(lnf) (acts.dln) and wte's gradient
 *     (the head's part, written in the forward) against a float64 evaluation of the head from
 *     the final norm's output, with wte's padding rows' gradient exactly 0;
 *   - after two micro-batches (forward, backward, twice, the gradients accumulating): the loss
 *     and every parameter gradient against the same model with the head in one chunk;
 *   - an evaluation forward gives the training forward's losses bit for bit and changes no
 *     gradient; gpt_head_logits against float64 logits;
 *   - gpt_set_head_rows and gpt_head_logits refuse rows outside their ranges; gpt_forward
 *     refuses an input token or target outside the vocabulary, wte's padding rows included
 *     (the kernels check against the padded table, a GPU kernel not at all);
 *   - gpt_head_rows's rule on hand-computed cases (d12 and d48 sizes, the bounds).
 * Measured: losses 7e-8 from float64, d(lnf) 6e-7, wte's gradient 2e-7; against one chunk
 * every gradient but wte's came out bit-identical and wte's (its sum split at the chunks)
 * 7e-8; the tolerances leave a factor of 10 or more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tests/sample/sample_testing.h"
#include "tests/testing.h"

enum { B = 2, T = 10, BT = B * T, C = 32, V = 200, VP = 256, CHUNK = 7 };
static const float DLOSS_SCALE = 0.37f;

static gpt_config small_config(void) {
  gpt_config c = {.n_layer = 1, .n_head = 2, .n_embd = C, .vocab = V, .max_seq = T};
  return c;
}

/* A fixed pattern of tokens below V, different for each micro-batch. */
static void make_tokens(int32_t *inputs, int32_t *targets, int micro) {
  for (int i = 0; i < BT; i++) {
    inputs[i] = (int32_t)((i * 37 + 11 + 101 * micro) % V);
    targets[i] = (int32_t)((i * 53 + 7 + 67 * micro) % V);
  }
}

/* The head in float64 from the model's final norm output and wte (CPU: device memory is host
 * memory): logits[BT, VP], losses[BT], dlnf[BT, C], dwte[VP, C] for dloss_scale. */
typedef struct head_ref {
  double logits[BT * VP], losses[BT], dlnf[BT * C], dwte[VP * C];
} head_ref;

static void head_reference(const gpt_model *m, const int32_t *targets, head_ref *r) {
  const float *lnf = m->acts.lnf;
  const st_tensor wte_t = unit_param_tensor(&m->units[0], GPT_WTE);
  const float *wte = wte_t.data;
  memset(r, 0, sizeof *r);
  for (int n = 0; n < BT; n++) {
    double *row = r->logits + n * VP, max = -INFINITY, sum = 0;
    for (int v = 0; v < VP; v++) {
      for (int k = 0; k < C; k++) row[v] += (double)lnf[n * C + k] * wte[v * C + k];
      if (v < V) max = fmax(max, row[v]);
    }
    for (int v = 0; v < V; v++) sum += exp(row[v] - max);
    r->losses[n] = log(sum) + max - row[targets[n]];
    for (int v = 0; v < V; v++) {
      const double g = (exp(row[v] - max) / sum - (v == targets[n])) * DLOSS_SCALE;
      for (int k = 0; k < C; k++) {
        r->dlnf[n * C + k] += g * wte[v * C + k];
        r->dwte[v * C + k] += g * lnf[n * C + k];
      }
    }
  }
}

/* max |got - want| / max |want| over n values. */
static double max_norm_error(const float *got, const double *want, int64_t n) {
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; i++) {
    err = fmax(err, fabs(got[i] - want[i]));
    ref = fmax(ref, fabs(want[i]));
  }
  return err / ref;
}

static void check_head_after_forward(gpt_model *m, const int32_t *targets) {
  head_ref *r = malloc(sizeof *r);
  if (!r) exit(1);
  head_reference(m, targets, r);
  const double losses = max_norm_error(m->acts.losses, r->losses, BT);
  const double dlnf = max_norm_error(m->acts.dln, r->dlnf, BT * C);
  const st_tensor dwte_t = unit_grad_tensor(&m->units[0], GPT_WTE);
  const float *dwte = dwte_t.data;
  const double dwte_err = max_norm_error(dwte, r->dwte, VP * C);
  CHECK_MSG(losses <= 1e-6, "chunked losses: relative error %.3g > 1e-6", losses);
  CHECK_MSG(dlnf <= 1e-5, "chunked d(lnf): relative error %.3g > 1e-5", dlnf);
  CHECK_MSG(dwte_err <= 1e-5, "chunked head's wte gradient: relative error %.3g > 1e-5", dwte_err);
  int padding_zero = 1;
  for (int i = V * C; i < VP * C; i++) padding_zero &= dwte[i] == 0.0f;
  CHECK_MSG(padding_zero, "the head leaves wte's padding rows' gradient at 0");

  /* Rows 13..19 (the second chunk's end and the third) recomputed by gpt_head_logits. */
  st_tensor logits;
  CHECK_OK(gpt_head_logits(m, 13, CHUNK, &logits));
  const double err = max_norm_error(logits.data, r->logits + 13 * VP, CHUNK * VP);
  CHECK_MSG(err <= 1e-6, "gpt_head_logits: relative error %.3g > 1e-6", err);
  free(r);
}

/* One micro-batch's forward and backward; *loss += the sum of its losses. */
static void micro_batch(gpt_model *m, int micro, double *loss, int check_head) {
  int32_t inputs[BT], targets[BT];
  make_tokens(inputs, targets, micro);
  CHECK_OK(gpt_forward(m, inputs, targets, DLOSS_SCALE));
  for (int i = 0; i < BT; i++) *loss += m->acts.losses[i];
  if (check_head) check_head_after_forward(m, targets);
  CHECK_OK(gpt_backward(m, 0));
}

/* Every parameter gradient of `got` against `want`'s, max-norm relative per tensor. */
static void compare_gradients(const gpt_model *got, const gpt_model *want, double tol) {
  for (int u = 0; u < got->n_units; u++) {
    for (int k = 0; k < got->units[u].layout.count; k++) {
      const st_tensor g = unit_grad_tensor(&got->units[u], k),
                      w = unit_grad_tensor(&want->units[u], k);
      const int64_t n = got->units[u].layout.params[k].numel;
      const float *gd = g.data, *wd = w.data;
      double err = 0, ref = 0;
      for (int64_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)gd[i] - wd[i]));
        ref = fmax(ref, fabs((double)wd[i]));
      }
      CHECK_MSG(err <= tol * ref, "%s%s: chunked vs one chunk: relative error %.3g > %.1g",
                got->prefixes[u], got->units[u].layout.params[k].name, err / ref, tol);
    }
  }
}

/* An evaluation forward: the training forward's losses exactly, no gradient touched. */
static void check_evaluation(gpt_model *m) {
  int32_t inputs[BT], targets[BT];
  make_tokens(inputs, targets, 1);
  float trained[BT];
  memcpy(trained, m->acts.losses, sizeof trained);
  const unit *emb = &m->units[0];
  const size_t grad_bytes = (size_t)emb->layout.numel * sizeof(float);
  float *before = malloc(grad_bytes);
  if (!before) exit(1);
  memcpy(before, emb->grads, grad_bytes);
  CHECK_OK(gpt_forward(m, inputs, targets, 0.0f));
  CHECK_MSG(memcmp(trained, m->acts.losses, sizeof trained) == 0,
            "evaluation losses equal the training forward's bit for bit");
  CHECK_MSG(memcmp(before, emb->grads, grad_bytes) == 0,
            "an evaluation forward leaves the embedding's gradients alone");
  free(before);
}

static void check_bad_rows(gpt_model *m) {
  st_tensor t;
  CHECK_STATUS(gpt_set_head_rows(m, 0), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_set_head_rows(m, BT + 1), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_head_logits(m, 0, CHUNK + 1, &t), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_head_logits(m, BT - 3, 4, &t), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_head_logits(m, -1, 2, &t), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_head_logits(m, 0, 0, &t), ST_ERR_INVALID_ARG);
}

/* An id `bad` at position `at` of the inputs or the targets; the rest valid. */
static void check_bad_id(gpt_model *m, int in_targets, int at, int32_t bad) {
  int32_t inputs[BT], targets[BT];
  make_tokens(inputs, targets, 0);
  (in_targets ? targets : inputs)[at] = bad;
  char words[96];
  snprintf(words, sizeof words, "%s %d is %d, outside the vocabulary [0, %d)",
           in_targets ? "target" : "input token", at, bad, V);
  CHECK_STATUS(gpt_forward(m, inputs, targets, DLOSS_SCALE), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), words), "want '%s', got: %s", words, st_last_error());
}

static void check_bad_ids(gpt_model *m) {
  check_bad_id(m, 0, 3, V); /* wte's first padding row */
  check_bad_id(m, 0, BT - 1, VP - 1);
  check_bad_id(m, 0, 0, -1);
  check_bad_id(m, 1, 5, V);
}

/* The rows per chunk of a config `name` (or a shape) at B x T tokens on tp ranks. */
static int64_t rows_for(int n_layer, int n_head, int n_embd, int vocab, int Bn, int Tn, int tp) {
  gpt_config c = {
      .n_layer = n_layer, .n_head = n_head, .n_embd = n_embd, .vocab = vocab, .max_seq = Tn};
  CHECK_OK(gpt_config_finish(&c, tp));
  return gpt_head_rows(&c, Bn, Tn, tp);
}

static void check_rule(void) {
  /* d12, 16 x 1024: 16384 x 3072 / 50304 = 1000.6 -> 960. */
  CHECK_EQ_INT(rows_for(12, 12, 768, 50257, 16, 1024, 1), 960);
  /* tp 2 (vocabulary padded to 50432): 16384 x 1536 / 50432 = 499.0 -> 448. */
  CHECK_EQ_INT(rows_for(12, 12, 768, 50257, 16, 1024, 2), 448);
  /* d48, 1 x 1024: 1024 x 6400 / 50304 = 130.3 -> 128. */
  CHECK_EQ_INT(rows_for(48, 25, 1600, 50257, 1, 1024, 1), 128);
  /* tiny (4C = padded vocabulary), 4 x 32: the whole micro-batch. */
  CHECK_EQ_INT(rows_for(2, 4, 64, 256, 4, 32, 1), 128);
  /* A narrow model with a large vocabulary: 128 x 256 / 50304 = 0.65 -> at least 64. */
  CHECK_EQ_INT(rows_for(2, 4, 64, 50257, 2, 64, 1), 64);
  /* Fewer than 64 tokens: all of them. */
  CHECK_EQ_INT(rows_for(2, 4, 64, 50257, 1, 20, 1), 20);
}

int main(void) {
  check_rule();
  gpt_model *one = test_model(small_config(), B, TEST_WEIGHTS_WIDE, 5);
  gpt_model *chunked = test_model(small_config(), B, TEST_WEIGHTS_WIDE, 5);
  CHECK_EQ_INT(one->acts.head_rows, BT);
  CHECK_OK(gpt_set_head_rows(chunked, CHUNK)); /* 7, 7 and 6 rows */
  check_bad_rows(chunked);
  check_bad_ids(chunked);

  double loss_one = 0, loss_chunked = 0;
  CHECK_OK(gpt_zero_grads(one));
  CHECK_OK(gpt_zero_grads(chunked));
  for (int micro = 0; micro < 2; micro++) {
    micro_batch(one, micro, &loss_one, 0);
    micro_batch(chunked, micro, &loss_chunked, micro == 0);
  }
  CHECK_MSG(fabs(loss_chunked - loss_one) <= 1e-6 * fabs(loss_one),
            "loss sum chunked %.9g, one chunk %.9g", loss_chunked, loss_one);
  compare_gradients(chunked, one, 1e-6);
  check_evaluation(chunked);

  gpt_destroy(chunked);
  gpt_destroy(one);
  mem_stats stats;
  mem_stats_get(&stats);
  CHECK_EQ_INT(stats.live_blocks, 0);
  return test_finish("head_chunk_test");
}
