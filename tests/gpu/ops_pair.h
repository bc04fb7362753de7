/* ops_pair.h - what ops_vocab_test's cases share: the two backends (CPU and CUDA) side by side,
 * operands that exist on both (fp32 values on the host for the CPU backend, the same values in
 * the case's dtype in device memory for CUDA), and comparisons under the tolerances stated in
 * ops_vocab_test.c. */
#ifndef ST_TESTS_GPU_OPS_PAIR_H
#define ST_TESTS_GPU_OPS_PAIR_H

#include <stdint.h>

#include "core/device.h"
#include "kernels/kernels.h"

typedef struct pair_env {
  kernel_backend *cpu, *gpu;
  st_device cpu_dev, gpu_dev;
  st_stream cpu_stream, gpu_stream;
  uint64_t rng;
} pair_env;

/* One operand on both backends. `init` keeps the values it was made with (rounded to `dtype`),
 * so a case can put them back (pair_reset) to run an op again from the same start. */
typedef struct pair {
  st_dtype dtype; /* the CUDA side's; the CPU side is fp32 */
  int64_t n;
  float *host; /* the CPU tensor's data */
  float *init;
  st_tensor cpu;
  void *dev;
  st_tensor gpu;
} pair;

/* Uniform in [lo, hi). */
double pair_uniform(pair_env *e, double lo, double hi);
int32_t pair_below(pair_env *e, int32_t n);

/* A pair of `dtype` (the CPU side fp32) filled with values uniform in [lo, hi) rounded to
 * `dtype` (lo == hi: that constant). Exits on allocation failure. */
pair pair_make(pair_env *e, st_dtype dtype, int ndim, const int64_t *shape, double lo, double hi);
/* owner's elements from `off` on, seen as a tensor of `shape` on both sides, sharing owner's
 * memory (free the owner, never the view). off = 1 puts a 16-bit tensor 2 bytes past a 16-byte
 * boundary, for the kernels' unaligned paths. */
pair pair_view(const pair *owner, int64_t off, int ndim, const int64_t *shape);
/* Both sides back to `init`. */
void pair_reset(pair_env *e, pair *p);
/* The device side as fp32, into out[n]. */
void pair_fetch(pair_env *e, const pair *p, float *out);
/* malloc'ed pair_fetch. */
float *pair_fetch_new(pair_env *e, const pair *p);
void pair_free(pair *p);

/* int32 ids on both sides: host[] and a device copy. */
typedef struct pair_ids {
  int32_t *host;
  int32_t *dev;
  int64_t n;
} pair_ids;
pair_ids pair_ids_make(pair_env *e, const int32_t *values, int64_t n);
void pair_ids_free(pair_ids *ids);

/* Raw upload/download of `bytes` between host and device memory on the CUDA stream, synced. */
void pair_upload(pair_env *e, void *dev, const void *host, size_t bytes);
void pair_download(pair_env *e, void *host, const void *dev, size_t bytes);
void *pair_dev_alloc(pair_env *e, size_t bytes);

/* One check: got[i] (the CUDA result, as fp32) against want[i] under the tolerance of `dtype`
 * (ops_vocab_test.c's table). A failure names the op, the operand and the worst element. */
void pair_compare(const char *what, st_dtype dtype, const float *got, const double *want,
                  int64_t n);
/* The same with an fp32 reference (the CPU backend's result). */
void pair_compare_f(const char *what, st_dtype dtype, const float *got, const float *want,
                    int64_t n);
/* Fetches p's device side and compares it with its CPU side, under p's dtype's tolerance or
 * (pair_check_as) another's. */
void pair_check(pair_env *e, const char *what, const pair *p);
void pair_check_as(pair_env *e, const char *what, const pair *p, st_dtype tolerance_of);

/* "<op>: <what> [<dtype>]" for messages, in one of 4 rotating buffers (valid for 4 calls). */
const char *ops_label(const char *op, const char *what, st_dtype dtype);

/* 1 when the n floats of a and b are the same bits (a determinism check). */
int ops_same_bits(const float *a, const float *b, int64_t n);

/* What ops_vocab_test leaves out, each with a line saying so:
 * - ops_small(): d12's attention shape, under OPS_VOCAB_EMULATED=1 (set by
 *   tools/cuda_emu/run_tests.sh: the CUDA emulation runs the kernels on one CPU core, where that
 *   shape takes about an hour) or OPS_VOCAB_SMALL=1 (the GPU suite's sanitizer section, where
 *   the tools slow the kernels many times over);
 * - ops_cudnn_left_out(): the cudnn attention kind; NULL when it runs, else why not: the
 *   emulation has no cuDNN, and OPS_VOCAB_CUDNN=0 (the suite's racecheck and synccheck runs,
 *   which check this project's kernels, not cuDNN's). */
int ops_small(void);
const char *ops_cudnn_left_out(void);

/* The vocabulary's odd shape: batch, sequence, width and heads (head size 16), and a vocabulary
 * padded as the model pads it. */
enum { OPS_B = 3, OPS_T = 37, OPS_C = 80, OPS_NH = 5, OPS_V = 251, OPS_VP = 256 };

/* The cases of ops_vocab_attention.c; ops_run_attention_kind runs the training attention's again
 * on a backend made with ST_CUDA_ATTENTION=kind, in bf16 and fp16, from random seed rng. */
void ops_case_attention(pair_env *e, st_dtype dt);
void ops_case_attention_cached(pair_env *e, st_dtype dt);
void ops_run_attention_kind(pair_env *e, const char *kind, uint64_t rng);

/* The classifier's cases (ops_vocab_classifier.c). */
void ops_case_classifier(pair_env *e, st_dtype dt);

/* The cases of ops_vocab_buffers.c, one per op (ops_vocab_test.c has the others). */
void ops_case_cast(pair_env *e, st_dtype dt);
void ops_case_scale(pair_env *e, st_dtype dt);
void ops_case_finite_check(pair_env *e, st_dtype dt);
void ops_case_step_factors(pair_env *e, st_dtype dt);
void ops_case_sum_squares(pair_env *e, st_dtype dt);
void ops_case_sum(pair_env *e, st_dtype dt);
void ops_case_adamw(pair_env *e, st_dtype dt);

#endif /* ST_TESTS_GPU_OPS_PAIR_H */
