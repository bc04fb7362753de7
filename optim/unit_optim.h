/* unit_optim.h - the optimizer's work on units (sharding/unit.h), shared by the engine's
 * training step and the public st_unit calls: the sum of squares of the unit's gradient shard
 * (a part of the global gradient norm), and AdamW over its owned range. AdamW's segments are
 * the owned range cut parameter by parameter, so weight decay applies exactly to the tensors of
 * rank >= 2 however a shard cuts through them. */
#ifndef ST_OPTIM_UNIT_OPTIM_H
#define ST_OPTIM_UNIT_OPTIM_H

#include "core/device.h"
#include "kernels/kernels.h"
#include "optim/adamw.h"
#include "sharding/unit.h"

/* out[0] += sum of squares of this rank's gradient shard, parameter by parameter, leaving out the
 * parameters replicated across tensor parallelism on tp ranks other than 0: summed over the
 * shard and tp groups it is the model's squared norm, every parameter counted once. (The full
 * gradients at stage 0 hold the same values, but every stage sums the shard, so equal meshes
 * give bit-identical norms.) Padding is zero and adds nothing. out is an fp32 scalar in device
 * memory (kernel_sum_squares). */
st_status unit_optim_grad_sumsq(const unit *u, const kernel_backend *kb, const st_stream *stream,
                                const st_tensor *out);

/* AdamW step `step` (from 1) on the owned ranges of units[0..n) with gradients times
 * grad_scale, weight_decay on the parameters of rank >= 2 only, writing the owned parameters in
 * the param dtype as it goes; then publishes them (unit_publish), unit by unit in order. Per
 * unit, one kernel_adamw call over the owned range, its segments the parameters' intersections
 * with it, on the unit's kernel backend and stream, ordered after the work on C so far
 * (unit_optimizer_begin) without a host wait. `factors`: NULL, or the step's factors in device
 * memory (kernel_step_factors), read by the update in place of grad_scale; a step they skip
 * changes nothing (the publish still runs and re-gathers the unchanged parameters).
 *
 * With the optimizer offloaded (unit.h) the update runs on the host over the host-resident
 * master, m and v (offload_host.h: on a GPU consecutive units go through the pinned staging as
 * one sequence of chunks, the copies overlapping the host's update), and the parameters are back
 * in the owned range before unit_publish all-gathers them. */
st_status unit_optim_adamw(unit *units, int n, const adamw_hparams *h, float weight_decay, int step,
                           float lr, float grad_scale, const float *factors);

/* kernel_adamw over the owned elements [begin, begin + count) (offsets inside the owned range):
 * master, m and v from that offset, `params` and `grads` already pointing at it, every buffer in
 * memory of `kind`, the segments relative to begin. */
st_status unit_optim_adamw_range(const unit *u, const kernel_backend *kb, const st_stream *stream,
                                 st_device_kind kind, void *params, void *grads, int64_t begin,
                                 int64_t count, const kernel_adamw_step *step,
                                 const kernel_adamw_segment *segments, int segment_count);

#endif /* ST_OPTIM_UNIT_OPTIM_H */
