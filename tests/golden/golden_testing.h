/* golden_testing.h - what the golden tests (golden_test.c on one rank, golden_mesh_test.c on a
 * mesh) share: reading tensors and the batch out of tiny_golden.safetensors (README.md beside
 * it) and one forward and backward of the golden loss. Failures are recorded through
 * testing.h's CHECK macros; nothing here decides what a test compares. */
#ifndef ST_TESTS_GOLDEN_GOLDEN_TESTING_H
#define ST_TESTS_GOLDEN_GOLDEN_TESTING_H

#include <stddef.h>
#include <stdint.h>

#include "engine/io/safetensors.h"
#include "engine/model/gpt.h"

/* The golden batch: GOLDEN_B sequences of GOLDEN_T tokens; the loss is their mean. */
enum { GOLDEN_B = 4, GOLDEN_T = 32 };

/* Tensor `name` as stored (4-byte elements: F32, or the I32 tokens), in host memory the
 * caller frees with mem_free; *numel (may be NULL) receives its element count. NULL, with a
 * failed check, when the file lacks it. */
float *golden_read(const safetensors_reader *r, const char *name, uint64_t *numel);

/* `<prefix><HF name>` of unit u's parameter k (the prefix "grad.", "init." or "final.") into
 * name[size], and that tensor as golden_read returns it. */
float *golden_param_read(const gpt_model *m, const safetensors_reader *r, const char *prefix, int u,
                         int k, char *name, size_t size, uint64_t *numel);

/* Sequences [first, first + rows) of the golden batch: inputs tokens[:, :T] and targets
 * tokens[:, 1:], rows x GOLDEN_T each. */
void golden_batch(const safetensors_reader *r, int first, int rows, int32_t *inputs,
                  int32_t *targets);

/* One forward and backward of the golden batch's mean loss (dloss_scale 1 / (B T) of the whole
 * batch, whatever part of it this rank feeds) on zeroed gradients, as a training step runs them:
 * with `reduce`, each unit's gradient reduction starts after its backward and has finished on
 * return (unit_reduce_wait, gpt_step_end), so each rank's owned gradients (unit_owned_grads) are
 * those of the global loss; without it the model's full local gradients (unit_grad_tensor) are
 * this rank's own. Returns the sum of the losses of this rank's tokens. */
float golden_loss_and_grads(gpt_model *m, const int32_t *inputs, const int32_t *targets,
                            int reduce);

/* |a - b| / |b|. */
double golden_relative(double got, double want);

#endif /* ST_TESTS_GOLDEN_GOLDEN_TESTING_H */
