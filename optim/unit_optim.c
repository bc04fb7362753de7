/* unit_optim.c - gradient sum of squares and AdamW on a unit's owned range (unit_optim.h). */
#include "optim/unit_optim.h"

#include "core/alloc.h"
#include "core/error.h"

st_status unit_optim_grad_sumsq(const unit *u, const kernel_backend *kb, const st_stream *stream,
                                const st_tensor *out) {
  const int64_t begin = (int64_t)u->shard_rank * u->layout.shard_numel;
  const int64_t end = begin + u->layout.shard_numel;
  for (int k = 0; k < u->layout.count; k++) {
    const unit_param *p = &u->layout.params[k];
    if (p->split == TP_REPLICATED && u->layout.t != 0) continue; /* counted on tp rank 0 */
    int64_t lo = p->offset > begin ? p->offset : begin;
    int64_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    const int64_t n = hi - lo;
    st_tensor range;
    const st_dtype g = u->precision.reduce;
    char *at = (char *)u->grad_shard + (size_t)(lo - begin) * dtype_size(g);
    ST_CHECK(tensor_make(&range, at, g, u->dev->backend->kind, 1, &n));
    ST_CHECK(kernel_sum_squares(kb, out, &range, stream));
  }
  return ST_OK;
}

/* The owned gradients and parameters, and the step's factors, where the host can reach them
 * (optimizer offload): the unit's own buffers where device memory is host RAM; else the model's
 * shared pinned staging (host_staging.h) and a host copy of the factors, the gradients and the
 * factors copied in here and the parameters copied back by host_end. */
typedef struct host_view {
  void *grads, *params;
  const float *factors; /* NULL: the step's grad_scale */
  float factors_copy[KERNEL_STEP_FACTORS];
} host_view;

static st_status host_begin(unit *u, host_view *h, const float *factors) {
  h->grads = unit_owned_grads(u);
  h->params = unit_owned_params(u);
  h->factors = factors;
  if (!u->offload_staging) return ST_OK;
  const size_t n = (size_t)u->owned_numel;
  const size_t g = n * dtype_size(u->precision.reduce), p = n * dtype_size(u->precision.param);
  host_staging *staging = &u->streams->offload;
  ST_CHECK(host_staging_reserve(staging, g, p));
  ST_CHECK(stream_memcpy(&u->stream, staging->grads, h->grads, g));
  if (factors) {
    ST_CHECK(stream_memcpy(&u->stream, h->factors_copy, factors, sizeof h->factors_copy));
    h->factors = h->factors_copy;
  }
  ST_CHECK(stream_sync(&u->stream)); /* the host reads them next */
  h->grads = staging->grads;
  h->params = staging->params;
  return ST_OK;
}

/* Copies the staged parameters back into the owned range (when `status` is ST_OK) before they
 * are published; the staging stays for the next unit. */
static st_status host_end(unit *u, const host_view *h, st_status status) {
  if (!u->offload_staging || status != ST_OK) return status;
  const size_t p = (size_t)u->owned_numel * dtype_size(u->precision.param);
  ST_CHECK(stream_memcpy(&u->stream, unit_owned_params(u), h->params, p));
  return stream_sync(&u->stream);
}

/* One segment per parameter that meets the owned range, at its offset inside the range, with
 * weight_decay for the tensors of rank >= 2: *count of them in *out (freed by the caller). */
static st_status owned_segments(const unit *u, float weight_decay, kernel_adamw_segment **out,
                                int *count) {
  const int64_t begin = u->owned_begin, end = begin + u->owned_numel;
  *count = 0;
  ST_CHECK(mem_alloc((void **)out, (size_t)u->layout.count * sizeof **out, MEM_HOST, MEM_WORKSPACE,
                     NULL));
  for (int k = 0; k < u->layout.count; k++) {
    const unit_param *p = &u->layout.params[k];
    const int64_t lo = p->offset > begin ? p->offset : begin;
    const int64_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    (*out)[(*count)++] =
        (kernel_adamw_segment){lo - begin, hi - lo, p->ndim >= 2 ? weight_decay : 0.0f};
  }
  return ST_OK;
}

/* kernel_adamw over the owned range, every buffer a flat tensor of owned_numel elements of
 * `kind` memory. */
static st_status run_adamw(const unit *u, const kernel_backend *kb, const st_stream *stream,
                           st_device_kind kind, void *params, void *grads,
                           const kernel_adamw_step *step, const kernel_adamw_segment *segments,
                           int count) {
  const int64_t n = u->owned_numel;
  st_tensor param, master, m, v, grad;
  ST_CHECK(tensor_make(&param, params, u->precision.param, kind, 1, &n));
  ST_CHECK(tensor_make(&master, u->master, ST_FP32, kind, 1, &n));
  ST_CHECK(tensor_make(&m, u->adam_m, ST_FP32, kind, 1, &n));
  ST_CHECK(tensor_make(&v, u->adam_v, ST_FP32, kind, 1, &n));
  ST_CHECK(tensor_make(&grad, grads, u->precision.reduce, kind, 1, &n));
  return kernel_adamw(kb, &param, &master, &m, &v, &grad, step, segments, count, stream);
}

/* The update where the offloaded state lives: the host, through the CPU backend, on the staged
 * copies of the owned gradients and parameters. */
static st_status adamw_on_host(unit *u, const kernel_adamw_step *step,
                               const kernel_adamw_segment *segments, int count) {
  host_view view;
  ST_CHECK(host_begin(u, &view, step->factors));
  kernel_adamw_step on_host = *step;
  on_host.factors = view.factors;
  const st_device cpu = device_cpu();
  kernel_backend *kb = NULL;
  st_stream stream = {0};
  st_status status = kernel_backend_create(&cpu, &kb);
  if (status == ST_OK) status = stream_create(&cpu, &stream);
  if (status == ST_OK) {
    status = run_adamw(u, kb, &stream, ST_DEVICE_CPU, view.params, view.grads, &on_host, segments,
                       count);
  }
  stream_destroy(&stream);
  kernel_backend_destroy(kb);
  return host_end(u, &view, status);
}

st_status unit_optim_adamw(unit *u, const adamw_hparams *h, float weight_decay, int step, float lr,
                           float grad_scale, const float *factors) {
  const kernel_adamw_step s = {lr, h->beta1, h->beta2, h->eps, grad_scale, step, factors};
  ST_CHECK(unit_optimizer_begin(u));
  kernel_adamw_segment *segments = NULL;
  int count = 0;
  ST_CHECK(owned_segments(u, weight_decay, &segments, &count));
  st_status status;
  if (u->offload_optimizer) {
    status = adamw_on_host(u, &s, segments, count);
  } else if (!u->kb) {
    status = st_error(ST_ERR_INVALID_ARG,
                      "unit %s: AdamW needs a kernel backend (unit_use_kernels)", u->name);
  } else {
    status = run_adamw(u, u->kb, &u->stream, u->dev->backend->kind, unit_owned_params(u),
                       unit_owned_grads(u), &s, segments, count);
  }
  mem_free(segments);
  ST_CHECK(status);
  return unit_publish(u);
}
