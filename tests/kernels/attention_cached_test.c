/* attention_cached_test.c - attention over a key/value cache, C=12, NH=3 (head size 4), cache of
 * S=9 positions, fed as generation feeds it: a prompt of 5 tokens (past 0), one token (past 5),
 * then 2 (past 6). After each call: out against float64 loops written from the definition over
 * every k, v so far; the cache rows of the new tokens hold exactly their k and v; the rows past
 * them are untouched. The prompt's outputs also match the training kernel's on the same qkv.
 * Then the refusals (a cache too short, heads that do not divide C) and a failed scratch
 * allocation, which leaves nothing allocated. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

enum { C = 12, NH = 3, HS = C / NH, S = 9, MAX_NEW = 5 };

#define MARKER 777.0f /* in every cache row not yet written */

/* out[i] for the new tokens at positions [past, past + n), from q of the new tokens (rows of
 * 3C, q first) and every k, v of positions [0, past + n) (rows of C). */
static void ref_forward(const double *qkv_new, const double *k, const double *v, int past, int n,
                        double *out) {
  for (int i = 0; i < n; i++) {
    int pos = past + i;
    for (int h = 0; h < NH; h++) {
      double score[S], max = -INFINITY, sum = 0.0;
      for (int j = 0; j <= pos; j++) {
        score[j] = 0.0;
        for (int e = 0; e < HS; e++)
          score[j] += qkv_new[i * 3 * C + h * HS + e] * k[j * C + h * HS + e];
        score[j] /= sqrt((double)HS);
        max = fmax(max, score[j]);
      }
      for (int j = 0; j <= pos; j++) sum += (score[j] = exp(score[j] - max));
      for (int e = 0; e < HS; e++) {
        double y = 0.0;
        for (int j = 0; j <= pos; j++) y += score[j] / sum * v[j * C + h * HS + e];
        out[i * C + h * HS + e] = y;
      }
    }
  }
}

typedef struct cache_state {
  test_backend *tb;
  test_buf *k_cache, *v_cache;
  double k[S * C], v[S * C]; /* every k and v fed so far, float64 */
  test_rng rng;
} cache_state;

/* Feeds n new tokens at `past` and checks the call; returns the new tokens' outputs' buffer
 * (caller frees) and leaves their qkv in `qkv_out` (host floats) when given. */
static void feed(cache_state *cs, int past, int n, float *qkv_out, float *out_host) {
  int64_t qkv_shape[] = {n, 3 * C}, out_shape[] = {n, C};
  test_buf qkv = tbuf_tensor(cs->tb, ST_FP32, 2, qkv_shape);
  test_buf out = tbuf_tensor(cs->tb, ST_FP32, 2, out_shape);
  /* Values up to 2 make some softmax rows peaked, others flat. */
  rng_fill(&cs->rng, qkv.host, n * 3 * C, -2.0, 2.0);
  tbuf_upload(&qkv);
  const float *x = qkv.host;
  for (int i = 0; i < n; i++) {
    for (int e = 0; e < C; e++) {
      cs->k[(past + i) * C + e] = x[i * 3 * C + C + e];
      cs->v[(past + i) * C + e] = x[i * 3 * C + 2 * C + e];
    }
  }
  double *qkv64 = to_f64(qkv.host, n * 3 * C), want[MAX_NEW * C];
  ref_forward(qkv64, cs->k, cs->v, past, n, want);
  CHECK_OK(kernel_attention_cached_forward(cs->tb->kb, &out.t, &cs->k_cache->t, &cs->v_cache->t,
                                           &qkv.t, past, NH, &cs->tb->stream));
  tbuf_download(&out);
  tbuf_download(cs->k_cache);
  tbuf_download(cs->v_cache);
  check_close(past == 0 ? "cached attention, prompt" : "cached attention, next tokens", out.host,
              want, n * C, TOL_FP32);
  const float *kc = cs->k_cache->host, *vc = cs->v_cache->host;
  int stored = 1, untouched = 1;
  for (int i = 0; i < n; i++) {
    stored &= memcmp(kc + (past + i) * C, x + i * 3 * C + C, C * sizeof(float)) == 0;
    stored &= memcmp(vc + (past + i) * C, x + i * 3 * C + 2 * C, C * sizeof(float)) == 0;
  }
  for (int r = (past + n) * C; r < S * C; r++) untouched &= kc[r] == MARKER && vc[r] == MARKER;
  CHECK_MSG(stored, "past %d: the caches hold the new tokens' k and v exactly", past);
  CHECK_MSG(untouched, "past %d: cache rows from %d on are untouched", past, past + n);
  if (qkv_out) memcpy(qkv_out, qkv.host, (size_t)n * 3 * C * sizeof(float));
  memcpy(out_host, out.host, (size_t)n * C * sizeof(float));
  free(qkv64);
  tbuf_free(&out);
  tbuf_free(&qkv);
}

/* The training kernel on the prompt's qkv gives the same outputs. */
static void check_matches_training(test_backend *tb, const float *qkv_prompt, const float *got) {
  enum { T = 5 };
  int64_t qkv_shape[] = {1, T, 3 * C}, out_shape[] = {1, T, C};
  int64_t state_numel = kernel_attention_state_numel(tb->kb, 1, NH, T);
  test_buf qkv = tbuf_tensor(tb, ST_FP32, 3, qkv_shape);
  test_buf out = tbuf_tensor(tb, ST_FP32, 3, out_shape);
  test_buf state = tbuf_tensor(tb, ST_FP32, 1, &state_numel);
  memcpy(qkv.host, qkv_prompt, sizeof(float) * T * 3 * C);
  tbuf_upload(&qkv);
  CHECK_OK(kernel_attention_forward(tb->kb, &out.t, &state.t, &qkv.t, NH, &tb->stream));
  tbuf_download(&out);
  double want[T * C];
  for (int i = 0; i < T * C; i++) want[i] = ((const float *)out.host)[i];
  check_close("cached attention vs the training kernel", got, want, T * C, TOL_FP32);
  tbuf_free(&state);
  tbuf_free(&out);
  tbuf_free(&qkv);
}

static void check_refusals(cache_state *cs) {
  int64_t qkv_shape[] = {2, 3 * C}, out_shape[] = {2, C};
  test_buf qkv = tbuf_tensor(cs->tb, ST_FP32, 2, qkv_shape);
  test_buf out = tbuf_tensor(cs->tb, ST_FP32, 2, out_shape);
  const kernel_backend *kb = cs->tb->kb;
  const st_stream *s = &cs->tb->stream;
  CHECK_STATUS(kernel_attention_cached_forward(kb, &out.t, &cs->k_cache->t, &cs->v_cache->t, &qkv.t,
                                               S - 1, NH, s),
               ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "2 new tokens after 8 cached do not fit a cache of 9"),
            "detail: %s", st_last_error());
  CHECK_STATUS(kernel_attention_cached_forward(kb, &out.t, &cs->k_cache->t, &cs->v_cache->t, &qkv.t,
                                               -1, NH, s),
               ST_ERR_INVALID_ARG);
  CHECK_STATUS(kernel_attention_cached_forward(kb, &out.t, &cs->k_cache->t, &cs->v_cache->t, &qkv.t,
                                               0, 5, s),
               ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "5 heads do not divide 12 channels"), "detail: %s",
            st_last_error());
  /* The scratch allocation fails: out of memory, nothing left allocated (test_on_backends).
   * Only the CPU takes scratch from the allocator; CUDA's comes from its context's workspace,
   * so there the call does not allocate and succeeds. */
  mem_fail_nth(1);
  st_status status = kernel_attention_cached_forward(kb, &out.t, &cs->k_cache->t, &cs->v_cache->t,
                                                     &qkv.t, 0, NH, s);
  mem_fail_nth(0);
  const int allocates = strcmp(kernel_backend_name(kb), "cpu") == 0;
  CHECK_MSG(status == (allocates ? ST_ERR_OOM : ST_OK),
            "cached forward with the next allocation failing -> %s on %s", st_status_string(status),
            kernel_backend_name(kb));
  tbuf_free(&out);
  tbuf_free(&qkv);
}

static void body(test_backend *tb) {
  int64_t cache_shape[] = {S, C};
  test_buf k_cache = tbuf_tensor(tb, ST_FP32, 2, cache_shape);
  test_buf v_cache = tbuf_tensor(tb, ST_FP32, 2, cache_shape);
  for (int i = 0; i < S * C; i++) ((float *)k_cache.host)[i] = ((float *)v_cache.host)[i] = MARKER;
  tbuf_upload(&k_cache);
  tbuf_upload(&v_cache);
  cache_state *cs = calloc(1, sizeof *cs);
  *cs = (cache_state){.tb = tb, .k_cache = &k_cache, .v_cache = &v_cache, .rng = {71}};
  float prompt_qkv[5 * 3 * C], out[MAX_NEW * C];
  feed(cs, 0, 5, prompt_qkv, out);
  check_matches_training(tb, prompt_qkv, out);
  feed(cs, 5, 1, NULL, out);
  feed(cs, 6, 2, NULL, out);
  check_refusals(cs);
  free(cs);
  tbuf_free(&v_cache);
  tbuf_free(&k_cache);
}

int main(void) { return test_on_backends("attention_cached_test", body); }
