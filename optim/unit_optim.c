/* unit_optim.c - gradient sum of squares and AdamW on a unit's owned range (unit_optim.h). */
#include "optim/unit_optim.h"

#include "core/error.h"

st_status unit_optim_grad_sumsq(const unit *u, const kernel_backend *kb, const st_stream *stream,
                                double *out) {
  *out = 0;
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
    ST_CHECK(
        tensor_make(&range, u->grad_shard + (lo - begin), ST_FP32, u->dev->backend->kind, 1, &n));
    double part = 0;
    ST_CHECK(kernel_sum_squares(kb, &part, &range, stream));
    *out += part;
  }
  return ST_OK;
}

st_status unit_optim_adamw(unit *u, const adamw_hparams *h, float weight_decay, int step, float lr,
                           float grad_scale) {
  const int64_t begin = u->owned_begin, end = begin + u->owned_numel;
  float *grads = unit_owned_grads(u);
  for (int k = 0; k < u->layout.count; k++) {
    const unit_param *p = &u->layout.params[k];
    int64_t lo = p->offset > begin ? p->offset : begin;
    int64_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    float decay = p->ndim >= 2 ? weight_decay : 0.0f;
    int64_t at = lo - begin;
    ST_CHECK(adamw_update(h, step, lr, decay, grad_scale, u->master + at, grads + at,
                          u->adam_m + at, u->adam_v + at, (size_t)(hi - lo)));
  }
  return unit_publish(u);
}
