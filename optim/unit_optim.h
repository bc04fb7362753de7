/* unit_optim.h - the optimizer's work on one unit (sharding/unit.h), shared by the engine's
 * training step and the public st_unit calls: the sum of squares of the unit's gradient shard
 * (a part of the global gradient norm), and AdamW over its owned range. AdamW walks the owned
 * range parameter by parameter, so weight decay applies exactly to the tensors of rank >= 2
 * however a shard cuts through them. */
#ifndef ST_OPTIM_UNIT_OPTIM_H
#define ST_OPTIM_UNIT_OPTIM_H

#include "core/device.h"
#include "kernels/kernels.h"
#include "optim/adamw.h"
#include "sharding/unit.h"

/* *out = sum of squares of this rank's gradient shard, parameter by parameter, leaving out the
 * parameters replicated across tensor parallelism on tp ranks other than 0: summed over the
 * shard and tp groups it is the model's squared norm, every parameter counted once. (The full
 * gradients at stage 0 hold the same values, but every stage sums the shard, so equal meshes
 * give bit-identical norms.) Padding is zero and adds nothing. */
st_status unit_optim_grad_sumsq(const unit *u, const kernel_backend *kb, const st_stream *stream,
                                double *out);

/* AdamW step `step` (from 1) on the owned range with gradients times grad_scale, weight_decay
 * on the parameters of rank >= 2 only, writing the owned parameters in the param dtype as it
 * goes; then publishes them (unit_publish). */
st_status unit_optim_adamw(unit *u, const adamw_hparams *h, float weight_decay, int step, float lr,
                           float grad_scale);

#endif /* ST_OPTIM_UNIT_OPTIM_H */
