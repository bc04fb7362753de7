/* kernel_testing.h - what the kernel tests share: the backends each test runs on, device
 * buffers mirrored on the host (one by one, or a linear layer's set), a deterministic random
 * source, comparisons under per-dtype tolerances, the finite-difference gradient check and the
 * accumulation check.
 *
 * Every op test computes its expected values with its own float64 loops, so an op is never
 * checked against itself. A value passes when |got - want| <= abs + rel * |want|:
 *
 *   what is compared                                        abs      rel
 *   fp32 op vs its float64 reference (TOL_FP32)             1e-5     1e-5
 *   fp32 backward vs central differences of the float64     1e-5     1e-4
 *     reference, step 1e-5 (TOL_FP32_GRAD)
 *   bf16 result vs the exact value (TOL_BF16)               0        2^-8 (half a bf16 ulp)
 *   a sum accumulated wide and stored in an fp32 scalar     0        1e-6
 *     (sum of squares, TOL_SCALAR: one fp32 rounding, 6e-8, plus the backend's summation)
 *   one correctly rounded operation (residual add, casts)   0        0  (bit-exact)
 *
 * fp32 ops on these shapes sum up to a few hundred terms of size ~1; their rounding measured at
 * most a third of the tolerance (LayerNorm over 130 features), while a wrong formula is off by
 * 1e-2 or more. The central differences of the float64 reference are accurate to ~1e-9, so
 * the gradient tolerance is set by fp32 rounding too.
 */
#ifndef ST_TESTS_KERNELS_KERNEL_TESTING_H
#define ST_TESTS_KERNELS_KERNEL_TESTING_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "kernels/kernels.h"

typedef struct test_tol {
  double abs, rel;
} test_tol;

extern const test_tol TOL_FP32, TOL_FP32_GRAD, TOL_BF16, TOL_SCALAR;

/* ---- Backends ------------------------------------------------------------------------------ */

typedef struct test_backend {
  kernel_backend *kb;
  st_device device;
  st_stream stream;
} test_backend;

/* Runs `body` once on every backend this machine has (the CPU always; CUDA when a GPU and its
 * kernels exist, "SKIP" printed otherwise), checks that nothing it allocated stays live, and
 * returns test_finish(name)'s exit code. */
int test_on_backends(const char *name, void (*body)(test_backend *tb));

/* ---- Buffers ------------------------------------------------------------------------------- */

/* A buffer in the backend's device memory with a host mirror of the same bytes. Tests fill
 * `host`, upload, run the op, download and read `host`. */
typedef struct test_buf {
  st_tensor t; /* descriptor of the device copy (unset for id buffers) */
  void *device;
  void *host;
  size_t bytes;
  test_backend *tb;
} test_buf;

/* A tensor of `dtype` and `shape`, zero on both sides. Exits the test on allocation failure. */
test_buf tbuf_tensor(test_backend *tb, st_dtype dtype, int ndim, const int64_t *shape);
/* `count` int32 ids (tokens, targets), zero on both sides. */
test_buf tbuf_ids(test_backend *tb, int64_t count);
void tbuf_upload(test_buf *b);
void tbuf_download(test_buf *b);
/* Zeroes both sides. */
void tbuf_zero(test_buf *b);
void tbuf_free(test_buf *b);

/* The extents of a linear layer: inp [batch, seq, in] @ weight -> out [batch, seq, outs]. */
typedef struct test_linear_dims {
  int64_t batch, seq, in, outs;
} test_linear_dims;

/* A linear layer's fp32 operands and their gradients, zero on both sides: inp and dinp, weight
 * and dweight ([in, outs], or [outs, in] with out_in: the tied head), bias and dbias [outs],
 * out and dout. */
typedef struct test_linear {
  test_buf inp, dinp, weight, dweight, bias, dbias, out, dout;
} test_linear;

test_linear tlinear_alloc(test_backend *tb, test_linear_dims d, int out_in);
void tlinear_free(test_linear *l);

/* ---- Random values ------------------------------------------------------------------------- */

typedef struct test_rng {
  uint64_t state;
} test_rng;

double rng_uniform(test_rng *rng, double lo, double hi);
/* An integer in [0, n). */
int32_t rng_below(test_rng *rng, int32_t n);
void rng_fill(test_rng *rng, float *x, int64_t count, double lo, double hi);

/* A malloc'ed float64 copy of x (the reference computes on the exact same values). */
double *to_f64(const float *x, int64_t count);

/* ---- Float64 models of the storage formats -------------------------------------------------- */

/* Written from the formats' definitions, independently of core/dtype.h, so the casts and the
 * loss-scaling ops are checked against them and not against the library's own conversions. */

/* The largest finite value of `dtype`. */
double ref_max_finite(st_dtype dtype);

/* The value of 16 bits of bf16 or fp16: sign, exponent, fraction (NaN and infinities too). */
double ref_half_value(st_dtype dtype, uint16_t bits);

/* The value of `dtype` nearest x, ties to even: its significant bits, the subnormals' fixed
 * spacing, and infinity past the largest finite value (halfway past it rounds to even, which
 * is infinity). NaN and infinities are returned as they are. */
double ref_round(st_dtype dtype, double x);

/* ---- Checks -------------------------------------------------------------------------------- */

/* One check for the whole array: every got[i] is within `tol` of want[i]. A failure names the
 * worst element. Returns whether it passed. */
int check_close(const char *what, const float *got, const double *want, int64_t count,
                test_tol tol);

/* One check: analytic[i] matches the central difference of loss(ctx) with respect to x[i],
 * which is perturbed in place (and restored) in float64, under TOL_FP32_GRAD. */
void check_gradient(const char *what, double *x, int64_t count, const float *analytic,
                    double (*loss)(void *ctx), void *ctx);

/* Runs `backward` twice from zeroed gradients and checks that each of the first `overwritten`
 * gradients came out the same (the op writes it) and every other one doubled, which is what
 * accumulation (+=) means. The host mirrors keep the gradients of ONE call (uploaded back),
 * for the finite-difference checks that follow. */
void check_accumulates(const char *what, test_buf *const *grads, size_t ngrads, size_t overwritten,
                       st_status (*backward)(void *ctx), void *ctx);

/* omp_set_num_threads for the CPU backend; returns the thread count now in force. */
int test_set_threads(int threads);

#endif /* ST_TESTS_KERNELS_KERNEL_TESTING_H */
