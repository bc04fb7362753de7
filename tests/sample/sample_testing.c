/* sample_testing.c - models and reference logits for the generation tests (sample_testing.h). */
#include "tests/sample/sample_testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

static void fatal(const char *what) {
  fprintf(stderr, "FATAL: %s: %s\n", what, st_last_error());
  exit(1);
}

const st_device *test_device(void) {
  static st_device cpu;
  cpu = device_cpu();
  return &cpu;
}

/* Overwrites every parameter with the wide draw (TEST_WEIGHTS_WIDE). */
static void fill_wide(gpt_model *m, uint64_t seed) {
  for (int u = 0; u < m->n_units; u++) {
    unit *un = &m->units[u];
    for (int k = 0; k < un->layout.count; k++) {
      const unit_param *p = &un->layout.params[k];
      float *values = malloc((size_t)p->numel * sizeof *values);
      if (!values) exit(1);
      uint64_t stream = rng_stream_of(p->name) + (uint64_t)u;
      int norm_weight = strncmp(p->name, "ln_", 3) == 0 && strstr(p->name, ".weight");
      for (int64_t e = 0; e < p->numel; e++) {
        double z = rng_normal_at(seed, stream, (uint64_t)e);
        values[e] = norm_weight ? (float)(1.0 + 0.1 * z) : (float)(0.3 * z);
      }
      if (unit_set_params(un, p->offset, values, p->numel) != ST_OK) fatal("unit_set_params");
      free(values);
    }
  }
}

gpt_model *test_model(gpt_config cfg, int B, test_weights weights, uint64_t seed) {
  if (gpt_config_finish(&cfg, 1) != ST_OK) fatal("gpt_config_finish");
  gpt_model *m = NULL;
  if (gpt_create(&m, &cfg, test_device(), B, cfg.max_seq, NULL) != ST_OK) fatal("gpt_create");
  if (gpt_init_params(m, seed) != ST_OK) fatal("gpt_init_params");
  if (weights == TEST_WEIGHTS_WIDE) fill_wide(m, seed);
  return m;
}

void test_full_logits(gpt_model *m, const int32_t *tokens, float *out) {
  const int64_t rows = (int64_t)m->B * m->T;
  int32_t *targets = calloc((size_t)rows, sizeof *targets);
  if (!targets) exit(1);
  if (gpt_forward(m, tokens, targets, 0.0f) != ST_OK) fatal("gpt_forward");
  /* The forward keeps no logits: the head computes them again a chunk at a time, in the
   * model's activation dtype, converted to fp32 here on the host. */
  const int64_t chunk = m->acts.head_rows, vp = m->cfg.vocab_padded;
  void *held = malloc((size_t)(chunk * vp) * dtype_size(m->act));
  if (!held) exit(1);
  for (int64_t first = 0; first < rows; first += chunk) {
    const int64_t n = rows - first < chunk ? rows - first : chunk;
    st_tensor logits;
    if (gpt_head_logits(m, first, n, &logits) != ST_OK ||
        stream_memcpy(&m->stream, held, logits.data, tensor_nbytes(&logits)) != ST_OK ||
        stream_sync(&m->stream) != ST_OK) {
      fatal("computing the logits");
    }
    dtype_convert(out + first * vp, ST_FP32, held, m->act, (size_t)(n * vp));
  }
  free(held);
  free(targets);
}
