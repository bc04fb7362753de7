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

/* The owned gradients and parameters where the host can reach them: the unit's own buffers
 * where device memory is host RAM; else pinned copies (category OPTIMIZER_HOST, like the state
 * they serve), the gradients copied in here and the parameters copied back by host_end. */
typedef struct host_view {
  char *grads, *params;
  void *staged_grads, *staged_params;
} host_view;

static st_status host_begin(unit *u, host_view *h) {
  *h = (host_view){unit_owned_grads(u), unit_owned_params(u), NULL, NULL};
  if (!u->offload_staging) return ST_OK;
  const size_t n = (size_t)u->owned_numel;
  const size_t g = n * dtype_size(u->precision.reduce), p = n * dtype_size(u->precision.param);
  ST_CHECK(mem_alloc(&h->staged_grads, g, MEM_PINNED, MEM_OPTIMIZER_HOST, u->dev));
  st_status status = mem_alloc(&h->staged_params, p, MEM_PINNED, MEM_OPTIMIZER_HOST, u->dev);
  if (status == ST_OK) status = stream_memcpy(&u->stream, h->staged_grads, h->grads, g);
  if (status == ST_OK) status = stream_sync(&u->stream);
  if (status != ST_OK) {
    mem_free(h->staged_params);
    mem_free(h->staged_grads);
    return status;
  }
  h->grads = h->staged_grads;
  h->params = h->staged_params;
  return ST_OK;
}

/* Copies the staged parameters back into the owned range (when `status` is ST_OK) before they
 * are published, and frees the staging. */
static st_status host_end(unit *u, host_view *h, st_status status) {
  if (!u->offload_staging) return status;
  const size_t p = (size_t)u->owned_numel * dtype_size(u->precision.param);
  if (status == ST_OK)
    status = stream_memcpy(&u->stream, unit_owned_params(u), h->staged_params, p);
  if (status == ST_OK) status = stream_sync(&u->stream);
  mem_free(h->staged_params);
  mem_free(h->staged_grads);
  return status;
}

st_status unit_optim_adamw(unit *u, const adamw_hparams *h, float weight_decay, int step, float lr,
                           float grad_scale) {
  const int64_t begin = u->owned_begin, end = begin + u->owned_numel;
  const st_dtype g = u->precision.reduce, p = u->precision.param;
  host_view view;
  ST_CHECK(host_begin(u, &view));
  st_status status = ST_OK;
  for (int k = 0; status == ST_OK && k < u->layout.count; k++) {
    const unit_param *param = &u->layout.params[k];
    int64_t lo = param->offset > begin ? param->offset : begin;
    int64_t hi = param->offset + param->numel < end ? param->offset + param->numel : end;
    if (lo >= hi) continue;
    const size_t at = (size_t)(lo - begin);
    const adamw_range range = {.master = u->master + at,
                               .m = u->adam_m + at,
                               .v = u->adam_v + at,
                               .grad = view.grads + at * dtype_size(g),
                               .grad_dtype = g,
                               .param = view.params + at * dtype_size(p),
                               .param_dtype = p,
                               .n = (size_t)(hi - lo)};
    status = adamw_update(h, step, lr, param->ndim >= 2 ? weight_decay : 0.0f, grad_scale, &range);
  }
  ST_CHECK(host_end(u, &view, status));
  return unit_publish(u);
}
