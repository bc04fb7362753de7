/* kernel_testing.c - backends, buffers, random values and checks for the kernel tests. */
#include "tests/kernels/kernel_testing.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tests/testing.h"

const test_tol TOL_FP32 = {1e-5, 1e-5};
const test_tol TOL_FP32_GRAD = {1e-5, 1e-4};
const test_tol TOL_BF16 = {0.0, 1.0 / 256.0};
const test_tol TOL_SCALAR = {0.0, 1e-6};

/* Central-difference step: small enough that the O(h^2) error is ~1e-10, large enough that
 * the float64 cancellation error (~1e-16 / h) stays far below it. */
#define FD_STEP 1e-5

static void run_on(const char *name, const st_device *device, void (*body)(test_backend *tb)) {
  test_backend tb = {.device = *device};
  st_status status = kernel_backend_create(device, &tb.kb);
  if (status == ST_ERR_UNSUPPORTED) {
    test_skip(name, st_last_error());
    return;
  }
  CHECK_OK(status);
  if (status != ST_OK) return;
  status = stream_create(device, &tb.stream);
  CHECK_OK(status);
  if (status != ST_OK) {
    kernel_backend_destroy(tb.kb);
    return;
  }
  mem_stats before, after;
  mem_stats_get(&before);
  body(&tb);
  mem_stats_get(&after);
  CHECK_MSG(after.live_blocks == before.live_blocks, "%s on %s left %llu blocks allocated", name,
            kernel_backend_name(tb.kb),
            (unsigned long long)(after.live_blocks - before.live_blocks));
  stream_destroy(&tb.stream);
  kernel_backend_destroy(tb.kb);
}

int test_on_backends(const char *name, void (*body)(test_backend *tb)) {
  st_device cpu = device_cpu();
  run_on(name, &cpu, body);
  st_device gpu;
  if (device_cuda_count() > 0 && device_select("cuda", 0, &gpu) == ST_OK) {
    run_on(name, &gpu, body);
  } else {
    /* A failure, not a skip, where ST_TEST_REQUIRE_GPU=1 (the GPU suite; tests/testing.h). */
    test_skip(name, "no usable GPU: ran on the CPU backend only");
  }
  return test_finish(name);
}

static test_buf buf_alloc(test_backend *tb, size_t bytes) {
  test_buf b = {.tb = tb, .bytes = bytes};
  st_status status = mem_alloc(&b.device, bytes, MEM_DEVICE, MEM_WORKSPACE, &tb->device);
  b.host = calloc(1, bytes ? bytes : 1);
  if (status != ST_OK || !b.host) {
    fprintf(stderr, "FATAL: test buffer of %zu bytes: %s\n", bytes, st_last_error());
    exit(1);
  }
  tbuf_upload(&b);
  return b;
}

test_buf tbuf_tensor(test_backend *tb, st_dtype dtype, int ndim, const int64_t *shape) {
  st_tensor t;
  if (tensor_make(&t, NULL, dtype, tb->device.backend->kind, ndim, shape) != ST_OK) {
    fprintf(stderr, "FATAL: test tensor: %s\n", st_last_error());
    exit(1);
  }
  test_buf b = buf_alloc(tb, tensor_nbytes(&t));
  b.t = t;
  b.t.data = b.device;
  return b;
}

test_buf tbuf_ids(test_backend *tb, int64_t count) {
  return buf_alloc(tb, (size_t)count * sizeof(int32_t));
}

void tbuf_upload(test_buf *b) {
  CHECK_OK(stream_memcpy(&b->tb->stream, b->device, b->host, b->bytes));
  CHECK_OK(stream_sync(&b->tb->stream));
}

void tbuf_download(test_buf *b) {
  CHECK_OK(stream_sync(&b->tb->stream));
  CHECK_OK(stream_memcpy(&b->tb->stream, b->host, b->device, b->bytes));
  CHECK_OK(stream_sync(&b->tb->stream));
}

void tbuf_zero(test_buf *b) {
  memset(b->host, 0, b->bytes);
  tbuf_upload(b);
}

void tbuf_free(test_buf *b) {
  mem_free(b->device);
  free(b->host);
  *b = (test_buf){0};
}

test_linear tlinear_alloc(test_backend *tb, test_linear_dims d, int out_in) {
  int64_t inp_shape[] = {d.batch, d.seq, d.in}, out_shape[] = {d.batch, d.seq, d.outs};
  int64_t weight_shape[] = {out_in ? d.outs : d.in, out_in ? d.in : d.outs};
  test_linear l;
  l.inp = tbuf_tensor(tb, ST_FP32, 3, inp_shape);
  l.dinp = tbuf_tensor(tb, ST_FP32, 3, inp_shape);
  l.weight = tbuf_tensor(tb, ST_FP32, 2, weight_shape);
  l.dweight = tbuf_tensor(tb, ST_FP32, 2, weight_shape);
  l.bias = tbuf_tensor(tb, ST_FP32, 1, &d.outs);
  l.dbias = tbuf_tensor(tb, ST_FP32, 1, &d.outs);
  l.out = tbuf_tensor(tb, ST_FP32, 3, out_shape);
  l.dout = tbuf_tensor(tb, ST_FP32, 3, out_shape);
  return l;
}

void tlinear_free(test_linear *l) {
  test_buf *all[] = {&l->dout,    &l->out,    &l->dbias, &l->bias,
                     &l->dweight, &l->weight, &l->dinp,  &l->inp};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tbuf_free(all[i]);
}

/* splitmix64: tiny, fast, and the same sequence on every machine. */
static uint64_t rng_next(test_rng *rng) {
  uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double rng_uniform(test_rng *rng, double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next(rng) >> 11) * 0x1.0p-53;
}

int32_t rng_below(test_rng *rng, int32_t n) { return (int32_t)(rng_next(rng) % (uint64_t)n); }

void rng_fill(test_rng *rng, float *x, int64_t count, double lo, double hi) {
  for (int64_t i = 0; i < count; i++) x[i] = (float)rng_uniform(rng, lo, hi);
}

double *to_f64(const float *x, int64_t count) {
  double *y = malloc((size_t)count * sizeof *y);
  if (!y) {
    fprintf(stderr, "FATAL: out of memory\n");
    exit(1);
  }
  for (int64_t i = 0; i < count; i++) y[i] = x[i];
  return y;
}

/* A format described by its fraction bits and exponent bias (the exponent takes the bits that
 * the sign and the fraction leave). */
typedef struct ref_format {
  int bits, fraction_bits, bias;
} ref_format;

static ref_format format_of(st_dtype dtype) {
  switch (dtype) {
    case ST_BF16: return (ref_format){16, 7, 127};
    case ST_FP16: return (ref_format){16, 10, 15};
    default: return (ref_format){32, 23, 127};
  }
}

static int exponent_bits(ref_format f) { return f.bits - 1 - f.fraction_bits; }

/* The exponent of the subnormals' spacing: 2^lowest is the smallest positive value. */
static int lowest_exponent(ref_format f) { return 1 - f.bias - f.fraction_bits; }

double ref_max_finite(st_dtype dtype) {
  const ref_format f = format_of(dtype);
  const int top = (1 << exponent_bits(f)) - 2 - f.bias;
  return ldexp(2.0 - ldexp(1.0, -f.fraction_bits), top);
}

double ref_half_value(st_dtype dtype, uint16_t bits) {
  const ref_format f = format_of(dtype);
  const int all_ones = (1 << exponent_bits(f)) - 1;
  const int exponent = (bits >> f.fraction_bits) & all_ones;
  const int fraction = bits & ((1 << f.fraction_bits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == all_ones) return fraction ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * ldexp(fraction, lowest_exponent(f));
  return sign * ldexp((1 << f.fraction_bits) + fraction, exponent + lowest_exponent(f) - 1);
}

double ref_round(st_dtype dtype, double x) {
  if (x == 0.0 || !isfinite(x)) return x;
  const ref_format f = format_of(dtype);
  int exponent;
  frexp(fabs(x), &exponent); /* |x| = m 2^exponent, m in [0.5, 1) */
  int quantum = exponent - 1 - f.fraction_bits;
  if (quantum < lowest_exponent(f)) quantum = lowest_exponent(f);
  const double y = ldexp(nearbyint(ldexp(fabs(x), -quantum)), quantum); /* ties to even */
  return copysign(y > ref_max_finite(dtype) ? INFINITY : y, x);
}

int check_close(const char *what, const float *got, const double *want, int64_t count,
                test_tol tol) {
  int64_t worst = -1;
  double worst_excess = 0.0, max_err = 0.0;
  for (int64_t i = 0; i < count; i++) {
    double err = fabs((double)got[i] - want[i]);
    double excess = err - (tol.abs + tol.rel * fabs(want[i]));
    if (err > max_err) max_err = err;
    if (!(excess <= 0.0) && (worst < 0 || excess > worst_excess)) {
      worst = i;
      worst_excess = excess;
    }
  }
  if (worst < 0) return test_check(1, __FILE__, __LINE__, "%s", what);
  return test_check(0, __FILE__, __LINE__,
                    "%s: element %lld is %.9g, expected %.9g (abs %g + rel %g; max error %g)", what,
                    (long long)worst, (double)got[worst], want[worst], tol.abs, tol.rel, max_err);
}

void check_gradient(const char *what, double *x, int64_t count, const float *analytic,
                    double (*loss)(void *ctx), void *ctx) {
  double *numeric = malloc((size_t)count * sizeof *numeric);
  for (int64_t i = 0; i < count; i++) {
    double saved = x[i];
    x[i] = saved + FD_STEP;
    double up = loss(ctx);
    x[i] = saved - FD_STEP;
    double down = loss(ctx);
    x[i] = saved;
    numeric[i] = (up - down) / (2.0 * FD_STEP);
  }
  check_close(what, analytic, numeric, count, TOL_FP32_GRAD);
  free(numeric);
}

void check_accumulates(const char *what, test_buf *const *grads, size_t ngrads, size_t overwritten,
                       st_status (*backward)(void *ctx), void *ctx) {
  for (size_t g = 0; g < ngrads; g++) tbuf_zero(grads[g]);
  CHECK_OK(backward(ctx));
  float **once = calloc(ngrads, sizeof *once);
  for (size_t g = 0; g < ngrads; g++) {
    tbuf_download(grads[g]);
    once[g] = malloc(grads[g]->bytes);
    memcpy(once[g], grads[g]->host, grads[g]->bytes);
  }
  CHECK_OK(backward(ctx));
  for (size_t g = 0; g < ngrads; g++) {
    int64_t count = (int64_t)(grads[g]->bytes / sizeof(float));
    const int written = g < overwritten;
    double *want = to_f64(once[g], count);
    for (int64_t i = 0; written == 0 && i < count; i++) want[i] *= 2.0;
    tbuf_download(grads[g]);
    char label[160];
    snprintf(label, sizeof label, "%s: gradient %zu %s", what, g,
             written ? "is overwritten" : "accumulates");
    check_close(label, grads[g]->host, want, count, TOL_FP32);
    memcpy(grads[g]->host, once[g], grads[g]->bytes);
    tbuf_upload(grads[g]);
    free(want);
    free(once[g]);
  }
  free(once);
}

int test_set_threads(int threads) {
  omp_set_num_threads(threads);
  return omp_get_max_threads();
}
