/* gpt_tp.c - Megatron's f and g of a GPT block (see gpt_tp.h). Both are the same all-reduce,
 * ordered on the model's tp stream between the compute stream's events; they are named apart
 * so each call site says which operator it applies. C's wait for the sum counts as exposed
 * communication (sharding/comm_exposure.h). */
#include "engine/model/gpt_tp.h"

#include "core/error.h"
#include "sharding/comm.h"

static st_status tp_sum(gpt_model *m, void *buf) {
  if (m->tp_size == 1) return ST_OK;
  /* On the tp stream after C's work so far (buf's producers); C goes on after the sum. */
  ST_CHECK(event_record(&m->tp_ready, &m->stream));
  ST_CHECK(stream_wait_event(&m->tp_stream, &m->tp_ready));
  comm_work work;
  ST_CHECK(comm_all_reduce_on(m->tp, &m->tp_stream, buf, buf, (size_t)m->B * m->T * m->cfg.n_embd,
                              m->act, COMM_SUM, &work));
  return comm_exposure_order_after(&m->streams.exposure, &work); /* C waits for the sum */
}

st_status gpt_tp_g_forward(gpt_model *m, void *buf) { return tp_sum(m, buf); }

st_status gpt_tp_f_backward(gpt_model *m, void *buf) { return tp_sum(m, buf); }
