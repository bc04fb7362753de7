/* attention.c - causal multi-head self-attention on the CPU, forward and backward.
 *
 * Each (batch, head) is a handful of matrix products, all through kernel_cpu_sgemm on strided
 * views: head h's q is a [T, hs] matrix starting at feature h*hs of qkv with row stride 3C (k
 * and v C and 2C further on), so nothing is copied or transposed. The score products are full
 * T x T, twice the causal work, because dense sgemm still beats a triangular loop; the masked
 * probabilities are zero, so they add nothing to the products that follow. The forward runs
 * one (batch, head) per OpenMP thread (fewer heads than threads: one head at a time, its
 * products cut across the threads), each writing only its own block of the probabilities. The
 * backward takes one T x T scratch from the workspace, so it goes head by head, each product
 * cut across the threads by kernel_cpu_sgemm and the softmax's gradient parallel over rows. */
#include <math.h>
#include <omp.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

typedef struct attention_dims {
  int batch, seq, channels, heads, head_size;
} attention_dims;

static attention_dims dims_of(const st_tensor *qkv, int64_t n_head) {
  attention_dims d = {(int)qkv->shape[0], (int)qkv->shape[1], (int)qkv->shape[2] / 3, (int)n_head,
                      0};
  d.head_size = d.channels / d.heads;
  return d;
}

/* Element offsets of head h of batch b: its q in qkv (k and v follow at +C and +2C), its
 * features in out (or dout), and its T x T block of probs. */
static int64_t qkv_offset(const attention_dims *d, int b, int h) {
  return (int64_t)b * d->seq * 3 * d->channels + (int64_t)h * d->head_size;
}

static int64_t out_offset(const attention_dims *d, int b, int h) {
  return (int64_t)b * d->seq * d->channels + (int64_t)h * d->head_size;
}

static int64_t probs_offset(const attention_dims *d, int b, int h) {
  return ((int64_t)b * d->heads + h) * d->seq * d->seq;
}

void kernel_cpu_causal_softmax_row(float *row, int64_t last, int64_t len) {
  float max = row[0];
  for (int64_t j = 1; j <= last; j++) max = row[j] > max ? row[j] : max;
  float sum = 0.0f;
  for (int64_t j = 0; j <= last; j++) {
    row[j] = expf(row[j] - max);
    sum += row[j];
  }
  for (int64_t j = 0; j <= last; j++) row[j] /= sum;
  for (int64_t j = last + 1; j < len; j++) row[j] = 0.0f;
}

/* The CPU keeps the probabilities, [B, NH, T, T], as the attention's state. */
int64_t kernel_cpu_attention_state_numel(int64_t batch, int64_t n_head, int64_t seq) {
  return batch * n_head * seq * seq;
}

st_status kernel_cpu_attention_forward(void *ctx, const st_tensor *out, const st_tensor *probs,
                                       const st_tensor *qkv, int64_t n_head,
                                       const st_stream *stream) {
  (void)ctx;
  (void)stream;
  attention_dims d = dims_of(qkv, n_head);
  const float *x = qkv->data;
  float *p = probs->data, *y = out->data;
  int ld_qkv = 3 * d.channels;
  float scale = 1.0f / sqrtf((float)d.head_size);
  /* One head per thread: its products run on that thread (kernel_cpu_sgemm inside a parallel
   * region), and each head writes only its own block of probs and columns of out. With fewer
   * heads than threads, head after head, each product cut across the threads instead. */
  kernel_cpu_blas_single_thread();
#pragma omp parallel for collapse(2) \
    schedule(static) if (d.batch * d.heads >= omp_get_max_threads())
  for (int b = 0; b < d.batch; b++) {
    for (int h = 0; h < d.heads; h++) {
      const float *q = x + qkv_offset(&d, b, h);
      float *ph = p + probs_offset(&d, b, h);
      /* scores[T, T] = scale * q[T, hs] @ k[T, hs]^T, written where the probabilities go */
      kernel_cpu_sgemm(CblasNoTrans, CblasTrans, d.seq, d.seq, d.head_size, scale, q, ld_qkv,
                       q + d.channels, ld_qkv, 0.0f, ph, d.seq);
      for (int t = 0; t < d.seq; t++)
        kernel_cpu_causal_softmax_row(ph + (int64_t)t * d.seq, t, d.seq);
      /* out[T, hs] = probs[T, T] @ v[T, hs] */
      kernel_cpu_sgemm(CblasNoTrans, CblasNoTrans, d.seq, d.head_size, d.seq, 1.0f, ph, d.seq,
                       q + 2 * d.channels, ld_qkv, 0.0f, y + out_offset(&d, b, h), d.channels);
    }
  }
  return ST_OK;
}

/* The softmax's backward for one head, in place: dprobs (rows of T) becomes the gradient of
 * the scores, P * (dP - sum_j P dP) on and below the diagonal and 0 above it. */
static void softmax_backward(float *dprobs, const float *p, int seq) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < seq; t++) {
    const float *pt = p + (int64_t)t * seq;
    float *g = dprobs + (int64_t)t * seq;
    float dot = 0.0f;
    for (int j = 0; j <= t; j++) dot += pt[j] * g[j];
    for (int j = 0; j <= t; j++) g[j] = pt[j] * (g[j] - dot);
    for (int j = t + 1; j < seq; j++) g[j] = 0.0f;
  }
}

/* dqkv's slice of one head (b, h) = its gradient, with `scratch` holding T x T floats. */
static void head_backward(const attention_dims *d, int b, int h, float *dqkv, const float *dout,
                          const float *qkv, const float *probs, float *scratch) {
  int ld_qkv = 3 * d->channels, seq = d->seq, hs = d->head_size;
  float scale = 1.0f / sqrtf((float)hs);
  const float *q = qkv + qkv_offset(d, b, h), *k = q + d->channels, *v = q + 2 * d->channels;
  float *dq = dqkv + qkv_offset(d, b, h), *dk = dq + d->channels, *dv = dq + 2 * d->channels;
  const float *p = probs + probs_offset(d, b, h), *dy = dout + out_offset(d, b, h);
  /* dprobs[T, T] = dout[T, hs] @ v[T, hs]^T */
  kernel_cpu_sgemm(CblasNoTrans, CblasTrans, seq, seq, hs, 1.0f, dy, d->channels, v, ld_qkv, 0.0f,
                   scratch, seq);
  /* dv[T, hs] = probs[T, T]^T @ dout[T, hs] */
  kernel_cpu_sgemm(CblasTrans, CblasNoTrans, seq, hs, seq, 1.0f, p, seq, dy, d->channels, 0.0f, dv,
                   ld_qkv);
  softmax_backward(scratch, p, seq);
  /* scores = scale * q k^T, so dq = scale * dscores @ k and dk = scale * dscores^T @ q */
  kernel_cpu_sgemm(CblasNoTrans, CblasNoTrans, seq, hs, seq, scale, scratch, seq, k, ld_qkv, 0.0f,
                   dq, ld_qkv);
  kernel_cpu_sgemm(CblasTrans, CblasNoTrans, seq, hs, seq, scale, scratch, seq, q, ld_qkv, 0.0f, dk,
                   ld_qkv);
}

/* One head's dscores at a time. */
uint64_t kernel_cpu_attention_scratch_bytes(int64_t seq) {
  return (uint64_t)seq * (uint64_t)seq * sizeof(float);
}

st_status kernel_cpu_attention_backward(void *ctx, const st_tensor *dqkv, const st_tensor *dout,
                                        const st_tensor *qkv, const st_tensor *out,
                                        const st_tensor *probs, int64_t n_head,
                                        const st_stream *stream) {
  (void)ctx;
  (void)out;
  (void)stream;
  attention_dims d = dims_of(qkv, n_head);
  float *scratch = NULL;
  ST_CHECK(mem_alloc((void **)&scratch, (size_t)kernel_cpu_attention_scratch_bytes(d.seq), MEM_HOST,
                     MEM_WORKSPACE, NULL));
  for (int b = 0; b < d.batch; b++) {
    for (int h = 0; h < d.heads; h++) {
      head_backward(&d, b, h, dqkv->data, dout->data, qkv->data, probs->data, scratch);
    }
  }
  mem_free(scratch);
  return ST_OK;
}
