/* adamw_test.c - AdamW over a flat range with segments, against PyTorch's AdamW written here in
 * float64 over four steps (bias correction and moment accumulation exercised, learning rate
 * changing per step, a clipping scale), on 1000 elements cut into segments with and without weight
 * decay and gaps between them, for each pair of gradient dtype (fp32, bf16, fp16) and parameter
 * output (fp32, bf16, fp16, none): master, m and v within fp32 rounding of the reference; a
 * parameter exactly the master rounded to its dtype; the gaps untouched to the bit; and a range
 * the wrapper must refuse. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

enum { N = 1000, STEPS = 4, SEGMENTS = 3 };

/* Segments as a unit's parameters cut them: a matrix, a bias (no decay), a matrix at the end;
 * elements [37, 48) and [348, 352) are padding. */
static const kernel_adamw_segment segments[SEGMENTS] = {
    {0, 37, 0.1f}, {48, 300, 0.0f}, {352, N - 352, 0.1f}};

static const float BETA1 = 0.9f, BETA2 = 0.95f, EPS = 1e-8f, SCALE = 0.25f;

/* One float64 AdamW step on element i with gradient g (PyTorch's torch.optim.AdamW). */
static void ref_step(int step, double lr, double wd, double g, double *p, double *m, double *v) {
  const double b1 = BETA1, b2 = BETA2;
  g *= SCALE;
  *p -= lr * wd * *p;
  *m = b1 * *m + (1 - b1) * g;
  *v = b2 * *v + (1 - b2) * g * g;
  const double mhat = *m / (1 - pow(b1, step)), vhat = *v / (1 - pow(b2, step));
  *p -= lr * mhat / (sqrt(vhat) + EPS);
}

/* The weight decay of element i, or -1 in a gap. */
static double decay_of(int64_t i) {
  for (int s = 0; s < SEGMENTS; s++) {
    if (i >= segments[s].begin && i < segments[s].begin + segments[s].count)
      return segments[s].weight_decay;
  }
  return -1.0;
}

/* param_dtype ST_DTYPE_COUNT: no parameters written. */
static void check_adamw(test_backend *tb, st_dtype grad_dtype, st_dtype param_dtype) {
  const int with_param = param_dtype != ST_DTYPE_COUNT;
  if (!kernel_supports(tb->kb, KERNEL_OP_ADAMW, grad_dtype) ||
      (with_param && !kernel_supports(tb->kb, KERNEL_OP_ADAMW, param_dtype))) {
    return;
  }
  test_rng rng = {(uint64_t)(101 + grad_dtype * 7 + param_dtype)};
  const int64_t n = N;
  test_buf master = tbuf_tensor(tb, ST_FP32, 1, &n), m = tbuf_tensor(tb, ST_FP32, 1, &n);
  test_buf v = tbuf_tensor(tb, ST_FP32, 1, &n), grad = tbuf_tensor(tb, grad_dtype, 1, &n);
  test_buf param = tbuf_tensor(tb, with_param ? param_dtype : ST_FP32, 1, &n);
  float *pm = master.host, *mm = m.host, *vm = v.host;
  /* Start mid-run: moments already non-zero, parameters of both signs. Gaps hold sentinels. */
  rng_fill(&rng, pm, N, -0.5, 0.5);
  rng_fill(&rng, mm, N, -1e-3, 1e-3);
  rng_fill(&rng, vm, N, 1e-7, 1e-6);
  memset(param.host, 0x5a, param.bytes);
  test_buf *state[] = {&master, &m, &v, &param};
  for (size_t i = 0; i < sizeof state / sizeof *state; i++) tbuf_upload(state[i]);
  double *rp = to_f64(pm, N), *rm = to_f64(mm, N), *rv = to_f64(vm, N);
  float *before = malloc(3 * N * sizeof *before), *g32 = malloc(N * sizeof *g32);
  memcpy(before, pm, N * sizeof *pm);
  memcpy(before + N, mm, N * sizeof *mm);
  memcpy(before + 2 * N, vm, N * sizeof *vm);
  unsigned char *param_before = malloc(param.bytes);
  memcpy(param_before, param.host, param.bytes);

  for (int step = 1; step <= STEPS; step++) {
    const double lr = 1e-3 * step;
    rng_fill(&rng, g32, N, -1e-2, 1e-2);
    for (int64_t i = 0; i < N; i++) {
      dtype_store_f32(grad.host, grad_dtype, (size_t)i, g32[i]);
      g32[i] = dtype_load_f32(grad.host, grad_dtype, (size_t)i); /* the reference sees it stored */
      const double wd = decay_of(i);
      if (wd >= 0) ref_step(step, lr, wd, g32[i], &rp[i], &rm[i], &rv[i]);
    }
    tbuf_upload(&grad);
    const kernel_adamw_step hp = {(float)lr, BETA1, BETA2, EPS, SCALE, step, NULL};
    CHECK_OK(kernel_adamw(tb->kb, with_param ? &param.t : NULL, &master.t, &m.t, &v.t, &grad.t, &hp,
                          segments, SEGMENTS, &tb->stream));
  }
  for (size_t i = 0; i < sizeof state / sizeof *state; i++) tbuf_download(state[i]);

  char label[128];
  const char *pname = with_param ? dtype_name(param_dtype) : "no";
  snprintf(label, sizeof label, "adamw master (%s grads, %s params)", dtype_name(grad_dtype),
           pname);
  check_close(label, pm, rp, N, TOL_FP32);
  snprintf(label, sizeof label, "adamw m (%s grads, %s params)", dtype_name(grad_dtype), pname);
  check_close(label, mm, rm, N, TOL_FP32);
  snprintf(label, sizeof label, "adamw v (%s grads, %s params)", dtype_name(grad_dtype), pname);
  check_close(label, vm, rv, N, TOL_FP32);

  int gaps_kept = 1, params_rounded = 1;
  const size_t psize = dtype_size(param.t.dtype);
  for (int64_t i = 0; i < N; i++) {
    const unsigned char *pb = (const unsigned char *)param.host + i * psize;
    if (decay_of(i) < 0) {
      gaps_kept &= pm[i] == before[i] && mm[i] == before[N + i] && vm[i] == before[2 * N + i];
      gaps_kept &= memcmp(pb, param_before + i * psize, psize) == 0;
    } else if (with_param) {
      float want; /* the master rounded to the param dtype, in the first psize bytes */
      dtype_store_f32(&want, param_dtype, 0, pm[i]);
      params_rounded &= memcmp(pb, &want, psize) == 0;
    } else {
      params_rounded &= memcmp(pb, param_before + i * psize, psize) == 0; /* never written */
    }
  }
  CHECK_MSG(gaps_kept, "adamw (%s grads, %s params) leaves the gaps between segments untouched",
            dtype_name(grad_dtype), pname);
  CHECK_MSG(params_rounded, "adamw (%s grads, %s params) writes the master in the param dtype",
            dtype_name(grad_dtype), pname);

  free(param_before);
  free(g32);
  free(before);
  free(rv);
  free(rm);
  free(rp);
  test_buf *all[] = {&param, &grad, &v, &m, &master};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tbuf_free(all[i]);
}

/* Step counts from 1, and segments must be sorted, disjoint and inside the range. */
static void check_refusals(test_backend *tb) {
  const int64_t n = 16;
  test_buf master = tbuf_tensor(tb, ST_FP32, 1, &n), m = tbuf_tensor(tb, ST_FP32, 1, &n);
  test_buf v = tbuf_tensor(tb, ST_FP32, 1, &n), grad = tbuf_tensor(tb, ST_FP32, 1, &n);
  kernel_adamw_step hp = {1e-3f, BETA1, BETA2, EPS, 1.0f, 0, NULL};
  const kernel_adamw_segment ok[] = {{0, 8, 0.0f}};
  CHECK_STATUS(kernel_adamw(tb->kb, NULL, &master.t, &m.t, &v.t, &grad.t, &hp, ok, 1, &tb->stream),
               ST_ERR_INVALID_ARG);
  hp.step = 1;
  const kernel_adamw_segment overlap[] = {{0, 8, 0.0f}, {4, 8, 0.0f}}, outside[] = {{8, 9, 0.0f}};
  CHECK_STATUS(
      kernel_adamw(tb->kb, NULL, &master.t, &m.t, &v.t, &grad.t, &hp, overlap, 2, &tb->stream),
      ST_ERR_INVALID_ARG);
  CHECK_STATUS(
      kernel_adamw(tb->kb, NULL, &master.t, &m.t, &v.t, &grad.t, &hp, outside, 1, &tb->stream),
      ST_ERR_INVALID_ARG);
  test_buf *all[] = {&grad, &v, &m, &master};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tbuf_free(all[i]);
}

static void body(test_backend *tb) {
  CHECK(kernel_supports(tb->kb, KERNEL_OP_ADAMW, ST_FP32));
  CHECK(kernel_supports(tb->kb, KERNEL_OP_ADAMW, ST_BF16));
  CHECK(kernel_supports(tb->kb, KERNEL_OP_ADAMW, ST_FP16));
  const st_dtype grads[] = {ST_FP32, ST_BF16, ST_FP16};
  const st_dtype params[] = {ST_FP32, ST_BF16, ST_FP16, ST_DTYPE_COUNT};
  for (int g = 0; g < 3; g++) {
    for (int p = 0; p < 4; p++) check_adamw(tb, grads[g], params[p]);
  }
  check_refusals(tb);
}

int main(void) { return test_on_backends("adamw_test", body); }
