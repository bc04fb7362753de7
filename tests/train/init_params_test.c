/* init_params_test.c - gpt_init_params on one CPU rank, for a model whose wte (8192 x 512, 4.2 M
 * values) is four times the chunk of initial values held on the host at once: every master
 * weight sampled around each chunk boundary, and at the ends, equals GPT-2's initialisation
 * computed here from core/rng.h (N(0, 0.02) by element index, the padding rows 0, norm weights
 * 1, biases 0), in fp32 and with bf16 parameters (then the bf16 copy is the master rounded);
 * every weight's mean, standard deviation and share within one std against the normal law at
 * GPT-2's scales (0.02, the residual projections 0.02 / sqrt(2 n_layer)), which checks the
 * sampler and the scales without core/rng.h's code; and
 * the host memory the initialisation takes beyond what the model holds stays within 6 MiB (fp32
 * values and their 16-bit upload), not 6 bytes for each of wte's values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "engine/model/gpt.h"
#include "tests/testing.h"

enum { CHUNK = 1 << 20, SEED = 11 };

static double expected_wte(const gpt_config *c, int64_t g) {
  if (g >= (int64_t)c->vocab * c->n_embd) return 0.0; /* padding rows */
  return (float)(0.02 * rng_normal_at(SEED, rng_stream_of("wte.weight"), (uint64_t)g));
}

/* The n values drawn from N(0, std): their mean, standard deviation and share within one std
 * against the normal law's (0, std, 0.682689), each within 5 standard errors of n draws. This
 * checks the sampler and each tensor's scale independently of core/rng.h's code. */
static void check_moments(const char *what, const float *v, int64_t n, double std) {
  double sum = 0, sum_sq = 0;
  int64_t inside = 0;
  for (int64_t i = 0; i < n; i++) {
    sum += v[i];
    sum_sq += (double)v[i] * v[i];
    inside += fabs(v[i]) <= std;
  }
  const double mean = sum / n, sd = sqrt(sum_sq / n - mean * mean), share = (double)inside / n;
  const double one_sigma = 0.682689492137086;
  CHECK_MSG(fabs(mean) <= 5 * std / sqrt((double)n), "%s: mean %g of %lld values, std %g", what,
            mean, (long long)n, std);
  CHECK_MSG(fabs(sd / std - 1) <= 5 / sqrt(2.0 * n), "%s: std %g, expected %g", what, sd, std);
  CHECK_MSG(fabs(share - one_sigma) <= 5 * sqrt(one_sigma * (1 - one_sigma) / n),
            "%s: %.5f of the values within one std, expected %.5f", what, share, one_sigma);
}

/* GPT-2's scales: N(0, 0.02), the residual projections 0.02 / sqrt(2 n_layer). */
static void check_scales(const gpt_config *c, const float *embedding, const unit *e,
                         const float *block, const unit *b) {
  const double projection = 0.02 / sqrt(2.0 * c->n_layer);
  check_moments("wte", embedding, (int64_t)c->vocab * c->n_embd, 0.02); /* without padding */
  check_moments("wpe", embedding + e->layout.params[GPT_WPE].offset,
                e->layout.params[GPT_WPE].numel, 0.02);
  const struct {
    int index;
    double std;
  } weights[] = {
      {GPT_QKV_W, 0.02}, {GPT_ATTPROJ_W, projection}, {GPT_FC_W, 0.02}, {GPT_FCPROJ_W, projection}};
  for (size_t i = 0; i < sizeof weights / sizeof *weights; i++) {
    const unit_param *p = &b->layout.params[weights[i].index];
    check_moments(p->name, block + p->offset, p->numel, weights[i].std);
  }
}

static void check_precision(st_dtype param) {
  gpt_config cfg = {.n_layer = 1, .n_head = 4, .n_embd = 512, .vocab = 8100, .max_seq = 16};
  CHECK_OK(gpt_config_finish(&cfg, 1));
  const st_device cpu = device_cpu();
  const gpt_parallel par = {.precision = {param, param}};
  gpt_model *m = NULL;
  CHECK_OK(gpt_create(&m, &cfg, &cpu, 1, 8, &par));
  if (!m) return;

  mem_stats before, after;
  mem_reset_peak();
  mem_stats_get(&before);
  CHECK_OK(gpt_init_params(m, SEED));
  mem_stats_get(&after);
  const uint64_t scratch = after.total_peak - before.total_current;
  CHECK_MSG(scratch <= (uint64_t)6 * CHUNK, "%s: initialisation took %llu bytes of scratch",
            dtype_name(param), (unsigned long long)scratch);

  unit *embedding = &m->units[0];
  const int64_t n = embedding->layout.numel, wte = (int64_t)cfg.vocab_padded * cfg.n_embd;
  CHECK(wte >= 4 * CHUNK);
  float *master = malloc((size_t)n * sizeof *master);
  if (!CHECK(master)) return;
  CHECK_OK(unit_gather_master(embedding, master));
  const int64_t samples[] = {0,
                             1,
                             CHUNK - 1,
                             CHUNK,
                             CHUNK + 1,
                             2 * CHUNK,
                             3 * CHUNK,
                             4 * CHUNK - 1,
                             (int64_t)cfg.vocab * cfg.n_embd - 1,
                             wte - 1};
  int wrong = 0;
  for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) {
    wrong += master[samples[i]] != (float)expected_wte(&cfg, samples[i]);
  }
  CHECK_MSG(wrong == 0, "%s: %d of wte's sampled master values wrong", dtype_name(param), wrong);
  if (param != ST_FP32) {
    int rounded_wrong = 0;
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) {
      uint16_t want;
      dtype_convert(&want, param, &master[samples[i]], ST_FP32, 1);
      rounded_wrong += ((const uint16_t *)embedding->params)[samples[i]] != want;
    }
    CHECK_MSG(rounded_wrong == 0, "%s: %d sampled parameters are not their masters rounded",
              dtype_name(param), rounded_wrong);
  }

  /* The block's norm weights are 1 and its biases 0. */
  unit *block = &m->units[1];
  float *block_master = malloc((size_t)block->layout.numel * sizeof *block_master);
  if (CHECK(block_master)) {
    CHECK_OK(unit_gather_master(block, block_master));
    const unit_param *ln = &block->layout.params[0], *ln_bias = &block->layout.params[1];
    CHECK(strcmp(ln->name, "ln_1.weight") == 0 && strcmp(ln_bias->name, "ln_1.bias") == 0);
    CHECK(block_master[ln->offset] == 1.0f && block_master[ln->offset + ln->numel - 1] == 1.0f);
    CHECK(block_master[ln_bias->offset] == 0.0f);
    if (param == ST_FP32) check_scales(&cfg, master, embedding, block_master, block);
    free(block_master);
  }
  free(master);
  gpt_destroy(m);
}

int main(void) {
  check_precision(ST_FP32);
  check_precision(ST_BF16);
  return test_finish("init_params_test");
}
