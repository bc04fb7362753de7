/* golden_testing.c - the golden tests' shared reading and forward-backward (golden_testing.h). */
#include "tests/golden/golden_testing.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "tests/testing.h"

float *golden_read(const safetensors_reader *r, const char *name, uint64_t *numel) {
  const safetensors_entry *e = safetensors_reader_find(r, name);
  CHECK_MSG(e != NULL, "golden file lacks '%s'", name);
  if (!e) return NULL;
  float *out = NULL;
  CHECK_OK(mem_alloc((void **)&out, e->numel * 4, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK_OK(safetensors_reader_read(r, e, 0, e->numel, out));
  if (numel) *numel = e->numel;
  return out;
}

float *golden_param_read(const gpt_model *m, const safetensors_reader *r, const char *prefix, int u,
                         int k, char *name, size_t size, uint64_t *numel) {
  snprintf(name, size, "%s%s%s", prefix, m->prefixes[u], m->units[u].layout.params[k].name);
  return golden_read(r, name, numel);
}

void golden_batch(const safetensors_reader *r, int first, int rows, int32_t *inputs,
                  int32_t *targets) {
  uint64_t n = 0;
  int32_t *tokens = (int32_t *)golden_read(r, "tokens", &n);
  CHECK_MSG(n == (uint64_t)GOLDEN_B * (GOLDEN_T + 1), "tokens: %llu elements, want %d x %d",
            (unsigned long long)n, GOLDEN_B, GOLDEN_T + 1);
  if (!tokens || n != (uint64_t)GOLDEN_B * (GOLDEN_T + 1)) {
    memset(inputs, 0, (size_t)rows * GOLDEN_T * sizeof(int32_t));
    memset(targets, 0, (size_t)rows * GOLDEN_T * sizeof(int32_t));
  } else {
    for (int b = 0; b < rows; b++) {
      const int32_t *row = tokens + (size_t)(first + b) * (GOLDEN_T + 1);
      memcpy(inputs + (size_t)b * GOLDEN_T, row, GOLDEN_T * sizeof(int32_t));
      memcpy(targets + (size_t)b * GOLDEN_T, row + 1, GOLDEN_T * sizeof(int32_t));
    }
  }
  mem_free(tokens);
}

float golden_loss_and_grads(gpt_model *m, const int32_t *inputs, const int32_t *targets,
                            int reduce) {
  float loss = 0;
  const st_tensor sum = gpt_scalar(m, GPT_LOSS_SUM);
  CHECK_OK(gpt_zero_grads(m));
  CHECK_OK(stream_memset(&m->stream, sum.data, 0, sizeof loss));
  CHECK_OK(gpt_forward(m, inputs, targets, 1.0f / (GOLDEN_B * GOLDEN_T)));
  CHECK_OK(gpt_loss_sum(m, &sum));
  CHECK_OK(gpt_backward(m, reduce));
  /* The backward finished every other unit's reduction; the embedding's is the last. */
  if (reduce) CHECK_OK(unit_reduce_wait(&m->units[0]));
  CHECK_OK(stream_memcpy(&m->stream, &loss, sum.data, sizeof loss));
  CHECK_OK(stream_sync(&m->stream));
  CHECK_OK(gpt_step_end(m));
  return loss;
}

double golden_relative(double got, double want) { return fabs(got - want) / fabs(want); }
