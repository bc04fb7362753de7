/* gpt_tp.c - Megatron's f and g of a GPT block (see gpt_tp.h). Both are the same all-reduce,
 * ordered on the model's tp stream between the compute stream's events; they are named apart
 * so each call site says which operator it applies. The step's scalar sums over the tp group
 * take the same path, so the tp communicator is only ever used on the tp stream. C's wait for a
 * sum counts as exposed communication (sharding/comm_exposure.h). */
#include "engine/model/gpt_tp.h"

#include "core/error.h"
#include "sharding/comm.h"

/* `count` values of `dtype` at buf summed in place over the tp group. */
static st_status tp_sum(gpt_model *m, void *buf, size_t count, st_dtype dtype) {
  if (m->tp_size == 1) return ST_OK;
  /* On the tp stream after C's work so far (buf's producers); C goes on after the sum. */
  ST_CHECK(event_record(&m->tp_ready, &m->stream));
  ST_CHECK(stream_wait_event(&m->tp_stream, &m->tp_ready));
  comm_work work;
  ST_CHECK(comm_all_reduce_on(m->tp, &m->tp_stream, buf, buf, count, dtype, COMM_SUM, &work));
  return comm_exposure_order_after(&m->streams.exposure, &work); /* C waits for the sum */
}

static st_status activation_sum(gpt_model *m, void *buf) {
  return tp_sum(m, buf, (size_t)m->B * m->T * m->cfg.n_embd, m->act);
}

st_status gpt_tp_g_forward(gpt_model *m, void *buf) { return activation_sum(m, buf); }

st_status gpt_tp_f_backward(gpt_model *m, void *buf) { return activation_sum(m, buf); }

st_status gpt_tp_sum_scalars(gpt_model *m, float *data, size_t count) {
  return tp_sum(m, data, count, ST_FP32);
}
