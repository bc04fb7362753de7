// adamw.cu - AdamW over a flat owned range in ONE launch per call, whatever the number of
// parameters (segments) in it.
//
// The segments, laid end to end, form a "virtual" range of total = sum(count) elements; the
// padding between parameters is not in it, so no thread is spent on it. Launch shape: 256
// threads per block, each block owns kChunk consecutive virtual elements (one per thread per
// step, coalesced within a segment). A block finds the segment holding its first element by a
// binary search over the segments' virtual starts (the same for all its threads: no
// divergence), and each thread walks its elements forward, moving to the next segment when it
// crosses a boundary. Each element is read and written by one thread: deterministic.
//
// The segment table travels in the kernel's parameter block when it has at most kInline
// entries (a GPT block has 12 parameters), else it is copied (stream-ordered) into the
// context's segment region from a host staging buffer. That region is one for the whole
// backend, and AdamW of different units runs on different streams with no host wait between
// them, so the long path synchronises its stream after the launch before the region can be
// reused: a host wait per call, the rare path's cost (a GPT unit has at most 12 segments). The
// inline path never waits.
//
// With the step's factors (kernels.h), every thread reads the skip flag and the gradient factor
// from device memory: a skipped step returns before touching anything.
//
// Update, in fp32 (kernels.h): g = grad * grad_scale; p -= lr wd p; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p -= lr (m / bc1) / (sqrt(v / bc2) + eps), bc = 1 - beta^step
// (computed on the host in double). param, when given, receives p rounded to its dtype.
#include <math.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"

extern "C" {
#include "core/check_cuda.h"
}

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = kThreads * 16;
constexpr int kInline = 64;

// CUDA_SEGMENT_BYTES, the size the workspace's segment region has per entry (cuda_facts.h).
struct Segment {
  int64_t begin, count, vstart;
  float weight_decay;
  float pad;
};
static_assert(sizeof(Segment) == CUDA_SEGMENT_BYTES, "cuda_facts.h sizes the segment region");

struct AdamwArgs {
  float *master, *m, *v;
  const void *grad;
  void *param;           // or NULL
  const float *factors;  // or NULL: grad_scale below
  float lr, beta1, beta2, eps, grad_scale, bc1, bc2;
  int64_t total;
  int count;
  const Segment *segments;  // device memory when count > kInline
  Segment inline_segments[kInline];
};

template <stk::Dt G, stk::Dt P>
__global__ void adamw_kernel(const __grid_constant__ AdamwArgs a) {
  float grad_scale = a.grad_scale;
  if (a.factors) {
    if (a.factors[KERNEL_STEP_SKIP] != 0.0f) return;
    grad_scale = a.factors[KERNEL_STEP_GRAD_SCALE];
  }
  const Segment *seg = a.count > kInline ? a.segments : a.inline_segments;
  const int64_t chunk_begin = (int64_t)blockIdx.x * kChunk;
  const int64_t chunk_end = chunk_begin + kChunk < a.total ? chunk_begin + kChunk : a.total;
  // The last segment whose virtual start is <= chunk_begin.
  int lo = 0, hi = a.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (seg[mid].vstart <= chunk_begin) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  int s = lo;
  for (int64_t vi = chunk_begin + threadIdx.x; vi < chunk_end; vi += kThreads) {
    while (vi >= seg[s].vstart + seg[s].count) s++;
    const int64_t i = seg[s].begin + (vi - seg[s].vstart);
    const float g = stk::load<G>(a.grad, i) * grad_scale;
    float p = a.master[i];
    p -= a.lr * seg[s].weight_decay * p;
    const float m = a.beta1 * a.m[i] + (1.0f - a.beta1) * g;
    const float v = a.beta2 * a.v[i] + (1.0f - a.beta2) * g * g;
    p -= a.lr * (m / a.bc1) / (sqrtf(v / a.bc2) + a.eps);
    a.m[i] = m;
    a.v[i] = v;
    a.master[i] = p;
    if (a.param) stk::store<P>(a.param, i, p);
  }
}

template <stk::Dt G>
void launch_for_param(st_dtype param_dtype, unsigned grid, const AdamwArgs &a, cudaStream_t s) {
  STK_DISPATCH_DT(param_dtype, (adamw_kernel<G, DT><<<grid, kThreads, 0, s>>>(a)));
}

}  // namespace

extern "C" st_status cuda_adamw(void *ctx, const st_tensor *param, const st_tensor *master,
                                const st_tensor *m, const st_tensor *v, const st_tensor *grad,
                                const kernel_adamw_step *step, const kernel_adamw_segment *segments,
                                int segment_count, const st_stream *stream) {
  cuda_context *cx = static_cast<cuda_context *>(ctx);
  const cudaStream_t s = stk::stream_of(stream);
  // Empty segments add nothing; dropping them keeps every stored segment non-empty, which the
  // kernel's forward walk relies on.
  int count = 0;
  int64_t total = 0;
  for (int i = 0; i < segment_count; i++) count += segments[i].count > 0;
  if (count == 0) return ST_OK;
  if (count > CUDA_SEGMENT_CAPACITY) {
    return st_error(ST_ERR_UNSUPPORTED,
                    "adamw: %d segments in one call; the CUDA context passes at most %d", count,
                    CUDA_SEGMENT_CAPACITY);
  }
  AdamwArgs a;  // 2.2 KB, copied into the launch's parameter block
  memset(&a, 0, sizeof a);
  Segment *table = count > kInline ? static_cast<Segment *>(cx->segments_host) : a.inline_segments;
  for (int i = 0, k = 0; i < segment_count; i++) {
    if (segments[i].count <= 0) continue;
    table[k].begin = segments[i].begin;
    table[k].count = segments[i].count;
    table[k].vstart = total;
    table[k].weight_decay = segments[i].weight_decay;
    total += segments[i].count;
    k++;
  }
  a.master = static_cast<float *>(master->data);
  a.m = static_cast<float *>(m->data);
  a.v = static_cast<float *>(v->data);
  a.grad = grad->data;
  a.param = param ? param->data : NULL;
  a.factors = step->factors;
  a.lr = step->lr;
  a.beta1 = step->beta1;
  a.beta2 = step->beta2;
  a.eps = step->eps;
  a.grad_scale = step->grad_scale;
  a.bc1 = (float)(1.0 - pow((double)step->beta1, (double)step->step));
  a.bc2 = (float)(1.0 - pow((double)step->beta2, (double)step->step));
  a.total = total;
  a.count = count;
  a.segments = static_cast<const Segment *>(cx->segments);
  if (count > kInline) {
    CUDA_CHECK(cudaMemcpyAsync(cx->segments, table, (size_t)count * sizeof(Segment),
                               cudaMemcpyHostToDevice, s));
  }
  const unsigned grid = (unsigned)((total + kChunk - 1) / kChunk);
  const st_dtype param_dtype = param ? param->dtype : ST_FP32;
  STK_DISPATCH_DT(grad->dtype, launch_for_param<DT>(param_dtype, grid, a, s));
  ST_CHECK(stk::launched("adamw", "adamw_kernel"));
  // The shared table is free again once the copy is done; stream_sync is the bounded wait
  // (core/device.h), as every host wait for queued work must be.
  if (count > kInline) ST_CHECK(stream_sync(stream));
  return ST_OK;
}
