/* gpt_tp.c - Megatron's f and g of a GPT block (see gpt_tp.h). Both are the same blocking
 * all-reduce; they are named apart so each call site says which operator it applies. */
#include "engine/model/gpt_tp.h"

#include "sharding/comm.h"

static st_status tp_sum(gpt_model *m, float *buf) {
  if (m->tp_size == 1) return ST_OK;
  return comm_all_reduce(m->tp, buf, buf, (size_t)m->B * m->T * m->cfg.n_embd, ST_FP32, COMM_SUM,
                         NULL);
}

st_status gpt_tp_g_forward(gpt_model *m, float *buf) { return tp_sum(m, buf); }

st_status gpt_tp_f_backward(gpt_model *m, float *buf) { return tp_sum(m, buf); }
