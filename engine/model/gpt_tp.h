/* gpt_tp.h - the tensor-parallel communication inside a GPT block (Megatron's f and g), on the
 * model's tp group. Each is an in-place sum of a [B*T, C] buffer over the group, and nothing on
 * one tp rank; the other direction of each operator is the identity, so these two calls are
 * all of it:
 *   g in the forward, after a row-parallel layer: the tp ranks' partial outputs are summed;
 *   f in the backward, before a column-parallel layer's input gradient reaches its LayerNorm:
 *     the tp ranks' partial input gradients are summed.
 * The forward and backward call these; the activation plan (gpt_acts.c) only lays out memory.
 * A third sum, of fp32 scalars (the step's gradient norm and overflow flag), takes the same tp
 * stream, so that the tp communicator is used on one stream only, as NCCL asks of a
 * communicator whose operations must keep one order on every rank. */
#ifndef ST_ENGINE_MODEL_GPT_TP_H
#define ST_ENGINE_MODEL_GPT_TP_H

#include "engine/model/gpt.h"

/* buf holds [B*T, C] values in the model's activation dtype. */
st_status gpt_tp_g_forward(gpt_model *m, void *buf);
st_status gpt_tp_f_backward(gpt_model *m, void *buf);

/* `count` fp32 values in device memory at `data` summed in place over the tp group. */
st_status gpt_tp_sum_scalars(gpt_model *m, float *data, size_t count);

#endif /* ST_ENGINE_MODEL_GPT_TP_H */
