/* public_optim.c - the public optimizer calls on a unit (st_unit_grad_sumsq,
 * st_unit_adamw_step): the handle's state checked by sharding's unit_handle_check, the work
 * done by unit_optim.c, exactly as the engine's training step does it. */
#include <math.h>
#include <stddef.h>

#include "core/config.h"
#include "core/error.h"
#include "optim/unit_optim.h"
#include "sharding/public_unit.h"

st_status st_unit_grad_sumsq(st_unit *unit, double *local) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED | UNIT_NEEDS_REDUCED));
  if (!local) return st_error(ST_ERR_INVALID_ARG, "%s: local is NULL", __func__);
  float host_sum = 0;
  st_tensor scalar;
  ST_CHECK(
      tensor_make(&scalar, unit->scalar, ST_FP32, unit->u.dev->backend->kind, 1, (int64_t[]){1}));
  ST_CHECK(stream_memset(&unit->u.stream, unit->scalar, 0, sizeof *unit->scalar));
  ST_CHECK(unit_optim_grad_sumsq(&unit->u, unit->kb, &unit->u.stream, &scalar));
  ST_CHECK(stream_memcpy(&unit->u.stream, &host_sum, unit->scalar, sizeof host_sum));
  ST_CHECK(stream_sync(&unit->u.stream));
  *local = host_sum;
  return ST_OK;
}

static st_status read_adamw_config(const st_adamw_config *config, adamw_hparams *h,
                                   float *weight_decay) {
  const st_adamw_config defaults = ST_ADAMW_CONFIG_INIT;
  st_adamw_config c;
  ST_CHECK(config_read(&c, &defaults, sizeof c, config,
                       offsetof(st_adamw_config, weight_decay) + sizeof(float), "st_adamw_config"));
  /* An infinite eps would stop every update, an infinite weight_decay turn the weights NaN. */
  if (!(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1 && c.eps > 0 &&
        isfinite(c.eps) && c.weight_decay >= 0 && isfinite(c.weight_decay))) {
    return st_error(ST_ERR_INVALID_ARG,
                    "st_adamw_config: beta1 %g and beta2 %g must lie in [0, 1), eps %g must be "
                    "a finite number > 0 and weight_decay %g a finite number >= 0",
                    c.beta1, c.beta2, c.eps, c.weight_decay);
  }
  *h = (adamw_hparams){c.beta1, c.beta2, c.eps};
  *weight_decay = c.weight_decay;
  return ST_OK;
}

st_status st_unit_adamw_step(st_unit *unit, const st_adamw_config *config, int step, float lr,
                             float grad_scale) {
  ST_CHECK(unit_handle_check(
      unit, __func__,
      UNIT_NEEDS_FINALIZED | UNIT_NEEDS_RELEASED | UNIT_NEEDS_REDUCED | UNIT_NEEDS_OPTIMIZER));
  adamw_hparams h;
  float weight_decay = 0;
  ST_CHECK(read_adamw_config(config, &h, &weight_decay));
  /* Checked here too, before kernel_adamw would: with the optimizer offloaded the update could
   * copy gradients down first, and every rank must refuse alike. */
  if (step < 1)
    return st_error(ST_ERR_INVALID_ARG, "%s: step %d; steps count from 1", __func__, step);
  /* lr 0 is a warm-up's first step; a NaN or infinite factor would turn every weight NaN. */
  if (!isfinite(lr) || lr < 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s: lr %g is not a finite number >= 0", __func__, lr);
  }
  if (!isfinite(grad_scale) || !(grad_scale > 0)) {
    return st_error(ST_ERR_INVALID_ARG, "%s: grad_scale %g is not a finite number > 0", __func__,
                    grad_scale);
  }
  ST_CHECK(unit_optim_adamw(&unit->u, 1, &h, weight_decay, step, lr, grad_scale, NULL));
  return unit_host_wait(&unit->u); /* the caller reads the published parameters next */
}
