/* ops_pair.c - operands on both backends and the comparisons of ops_vocab_test (ops_pair.h). */
#include "tests/gpu/ops_pair.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "tests/testing.h"

/* The tolerances, per dtype of the CUDA side (see ops_vocab_test.c): a value passes when
 * |got - want| <= abs * max|want| + rel * |want|. */
typedef struct pair_tol {
  double abs, rel;
} pair_tol;

static pair_tol tolerance(st_dtype dtype) {
  if (dtype == ST_FP32) return (pair_tol){1e-5, 1e-4};
  if (dtype == ST_FP16) return (pair_tol){4e-3, 4e-3};
  return (pair_tol){1e-2, 1e-2};
}

static void fatal(const char *what) {
  fprintf(stderr, "FATAL: %s: %s\n", what, st_last_error());
  exit(1);
}

double pair_uniform(pair_env *e, double lo, double hi) {
  uint64_t z = (e->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return lo + (hi - lo) * (double)(z >> 11) * 0x1.0p-53;
}

/* 1 when the variable is set to "1" (or to `value`). */
static int env_is(const char *name, const char *value) {
  const char *v = getenv(name);
  return v && strcmp(v, value) == 0;
}

int ops_small(void) { return env_is("OPS_VOCAB_EMULATED", "1") || env_is("OPS_VOCAB_SMALL", "1"); }

const char *ops_cudnn_left_out(void) {
  if (env_is("OPS_VOCAB_EMULATED", "1")) return "the emulation has no cuDNN";
  if (env_is("OPS_VOCAB_CUDNN", "0")) return "OPS_VOCAB_CUDNN=0";
  return NULL;
}

int32_t pair_below(pair_env *e, int32_t n) {
  int32_t v = (int32_t)pair_uniform(e, 0.0, (double)n);
  return v < n ? v : n - 1;
}

void *pair_dev_alloc(pair_env *e, size_t bytes) {
  void *p = NULL;
  if (mem_alloc(&p, bytes ? bytes : 1, MEM_DEVICE, MEM_WORKSPACE, &e->gpu_dev) != ST_OK) {
    fatal("device buffer");
  }
  return p;
}

void pair_upload(pair_env *e, void *dev, const void *host, size_t bytes) {
  if (stream_memcpy(&e->gpu_stream, dev, host, bytes) != ST_OK) fatal("upload");
  if (stream_sync(&e->gpu_stream) != ST_OK) fatal("upload sync");
}

void pair_download(pair_env *e, void *host, const void *dev, size_t bytes) {
  if (stream_sync(&e->gpu_stream) != ST_OK) fatal("sync before download");
  if (stream_memcpy(&e->gpu_stream, host, dev, bytes) != ST_OK) fatal("download");
  if (stream_sync(&e->gpu_stream) != ST_OK) fatal("download sync");
}

/* init -> host and, converted to the dtype, -> device. */
static void upload_init(pair_env *e, pair *p) {
  memcpy(p->host, p->init, (size_t)p->n * sizeof(float));
  void *staged = malloc((size_t)p->n * dtype_size(p->dtype));
  dtype_convert(staged, p->dtype, p->init, ST_FP32, (size_t)p->n);
  pair_upload(e, p->dev, staged, (size_t)p->n * dtype_size(p->dtype));
  free(staged);
}

pair pair_make(pair_env *e, st_dtype dtype, int ndim, const int64_t *shape, double lo, double hi) {
  pair p = {.dtype = dtype};
  if (tensor_make(&p.cpu, NULL, ST_FP32, ST_DEVICE_CPU, ndim, shape) != ST_OK) fatal("shape");
  p.n = tensor_numel(&p.cpu);
  p.host = malloc((size_t)p.n * sizeof(float));
  p.init = malloc((size_t)p.n * sizeof(float));
  if (!p.host || !p.init) fatal("host buffer");
  for (int64_t i = 0; i < p.n; i++) {
    float v = (float)(lo == hi ? lo : pair_uniform(e, lo, hi));
    p.init[i] = v;
    if (dtype != ST_FP32) {
      uint32_t h = 0; /* room for any dtype, so the compiler sees no overrun */
      dtype_store_f32(&h, dtype, 0, v);
      p.init[i] = dtype_load_f32(&h, dtype, 0);
    }
  }
  p.cpu.data = p.host;
  p.dev = pair_dev_alloc(e, (size_t)p.n * dtype_size(dtype));
  if (tensor_make(&p.gpu, p.dev, dtype, ST_DEVICE_CUDA, ndim, shape) != ST_OK) fatal("shape");
  upload_init(e, &p);
  return p;
}

pair pair_view(const pair *owner, int64_t off, int ndim, const int64_t *shape) {
  pair v = *owner;
  v.host = owner->host + off;
  v.init = owner->init + off;
  v.dev = (char *)owner->dev + off * (int64_t)dtype_size(owner->dtype);
  if (tensor_make(&v.cpu, v.host, ST_FP32, ST_DEVICE_CPU, ndim, shape) != ST_OK ||
      tensor_make(&v.gpu, v.dev, owner->dtype, ST_DEVICE_CUDA, ndim, shape) != ST_OK) {
    fatal("shape");
  }
  v.n = tensor_numel(&v.cpu);
  if (off < 0 || off + v.n > owner->n) fatal("view past its owner");
  return v;
}

void pair_reset(pair_env *e, pair *p) { upload_init(e, p); }

void pair_fetch(pair_env *e, const pair *p, float *out) {
  void *staged = malloc((size_t)p->n * dtype_size(p->dtype));
  pair_download(e, staged, p->dev, (size_t)p->n * dtype_size(p->dtype));
  dtype_convert(out, ST_FP32, staged, p->dtype, (size_t)p->n);
  free(staged);
}

float *pair_fetch_new(pair_env *e, const pair *p) {
  float *out = malloc((size_t)p->n * sizeof *out);
  pair_fetch(e, p, out);
  return out;
}

void pair_free(pair *p) {
  mem_free(p->dev);
  free(p->host);
  free(p->init);
  *p = (pair){0};
}

pair_ids pair_ids_make(pair_env *e, const int32_t *values, int64_t n) {
  pair_ids ids = {.n = n};
  ids.host = malloc((size_t)n * sizeof(int32_t));
  memcpy(ids.host, values, (size_t)n * sizeof(int32_t));
  ids.dev = pair_dev_alloc(e, (size_t)n * sizeof(int32_t));
  pair_upload(e, ids.dev, ids.host, (size_t)n * sizeof(int32_t));
  return ids;
}

void pair_ids_free(pair_ids *ids) {
  mem_free(ids->dev);
  free(ids->host);
  *ids = (pair_ids){0};
}

void pair_compare(const char *what, st_dtype dtype, const float *got, const double *want,
                  int64_t n) {
  const pair_tol tol = tolerance(dtype);
  double scale = 0.0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  int64_t worst = -1;
  double worst_excess = 0.0, max_err = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double err = fabs((double)got[i] - want[i]);
    const double excess = err - (tol.abs * scale + tol.rel * fabs(want[i]));
    if (err > max_err || isnan(err)) max_err = err;
    if (!(excess <= 0.0) && (worst < 0 || excess > worst_excess || isnan(excess))) {
      worst = i;
      worst_excess = excess;
    }
  }
  if (worst < 0) {
    test_check(1, __FILE__, __LINE__, "%s", what);
    return;
  }
  test_check(0, __FILE__, __LINE__,
             "%s (%s): element %lld of %lld is %.9g, expected %.9g (tolerance %g x max|want| %g "
             "+ %g x |want|; max error %g)",
             what, dtype_name(dtype), (long long)worst, (long long)n, (double)got[worst],
             want[worst], tol.abs, scale, tol.rel, max_err);
}

void pair_compare_f(const char *what, st_dtype dtype, const float *got, const float *want,
                    int64_t n) {
  double *w = malloc((size_t)n * sizeof *w);
  for (int64_t i = 0; i < n; i++) w[i] = want[i];
  pair_compare(what, dtype, got, w, n);
  free(w);
}

void pair_check_as(pair_env *e, const char *what, const pair *p, st_dtype tolerance_of) {
  float *got = pair_fetch_new(e, p);
  pair_compare_f(what, tolerance_of, got, p->host, p->n);
  free(got);
}

void pair_check(pair_env *e, const char *what, const pair *p) {
  pair_check_as(e, what, p, p->dtype);
}

int ops_same_bits(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

const char *ops_label(const char *op, const char *what, st_dtype dtype) {
  static char buf[4][160];
  static int next;
  char *b = buf[next++ % 4];
  snprintf(b, sizeof buf[0], "%s: %s [%s]", op, what, dtype_name(dtype));
  return b;
}
