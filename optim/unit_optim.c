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
    const st_dtype g = u->precision.reduce;
    char *at = (char *)u->grad_shard + (size_t)(lo - begin) * dtype_size(g);
    ST_CHECK(tensor_make(&range, at, g, u->dev->backend->kind, 1, &n));
    double part = 0;
    ST_CHECK(kernel_sum_squares(kb, &part, &range, stream));
    *out += part;
  }
  return ST_OK;
}

st_status unit_optim_adamw(unit *u, const adamw_hparams *h, float weight_decay, int step, float lr,
                           float grad_scale) {
  const int64_t begin = u->owned_begin, end = begin + u->owned_numel;
  const st_dtype g = u->precision.reduce, p = u->precision.param;
  char *grads = unit_owned_grads(u), *params = unit_owned_params(u);
  for (int k = 0; k < u->layout.count; k++) {
    const unit_param *param = &u->layout.params[k];
    int64_t lo = param->offset > begin ? param->offset : begin;
    int64_t hi = param->offset + param->numel < end ? param->offset + param->numel : end;
    if (lo >= hi) continue;
    const size_t at = (size_t)(lo - begin);
    const adamw_range range = {.master = u->master + at,
                               .m = u->adam_m + at,
                               .v = u->adam_v + at,
                               .grad = grads + at * dtype_size(g),
                               .grad_dtype = g,
                               .param = params + at * dtype_size(p),
                               .param_dtype = p,
                               .n = (size_t)(hi - lo)};
    ST_CHECK(adamw_update(h, step, lr, param->ndim >= 2 ? weight_decay : 0.0f, grad_scale, &range));
  }
  return unit_publish(u);
}
