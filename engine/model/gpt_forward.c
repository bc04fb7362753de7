/* gpt_forward.c - the GPT forward pass over one micro-batch, keeping every activation the
 * backward needs. Block l reads the residual stream from the previous block's res3 (the
 * embedding output for l = 0) and writes its own res2 and res3.
 *
 * Units are gathered in order with look-ahead (prefetch_acquire); a block is released after
 * its forward (stage 3: its full parameters; any stage: its fp32 compute copy) unless
 * reshard-after-forward is off. The embedding and final units stay gathered: the tied head
 * needs wte at the end of the forward and the start of the backward. */
#include "core/alloc.h"
#include "core/error.h"
#include "engine/model/gpt_internal.h"
#include "engine/model/gpt_tp.h"
#include "sharding/prefetch.h"

/* out = inp @ W (+ b once): a row-parallel layer. Its bias is replicated, so only tp rank 0
 * adds it before the partial outputs are summed. */
static st_status row_parallel(gpt_model *m, float *out_data, const st_tensor *out,
                              const st_tensor *inp, int u, int w_index, int b_index) {
  st_tensor w = GPT_P(m, u, w_index), b = GPT_P(m, u, b_index);
  ST_CHECK(kernel_matmul_forward(m->kb, out, inp, &w, m->tp_rank == 0 ? &b : NULL, &m->stream));
  return gpt_tp_g_forward(m, out_data);
}

static st_status block_forward(gpt_model *m, int l, float *x_in) {
  const kernel_backend *kb = m->kb;
  const st_stream *s = &m->stream;
  const int u = 1 + l;
  gpt_layer_views v;
  gpt_layer_views_make(m, l, x_in, &v);
  const gpt_layer_acts *a = &m->acts.layers[l];
  st_tensor w = GPT_P(m, u, GPT_LN1_W), b = GPT_P(m, u, GPT_LN1_B);
  ST_CHECK(kernel_layernorm_forward(kb, &v.ln1, &v.ln1_mean, &v.ln1_rstd, &v.x, &w, &b, s));
  w = GPT_P(m, u, GPT_QKV_W);
  b = GPT_P(m, u, GPT_QKV_B);
  ST_CHECK(kernel_matmul_forward(kb, &v.qkv, &v.ln1, &w, &b, s));
  ST_CHECK(kernel_attention_forward(kb, &v.atty3, &v.probs, &v.qkv3, gpt_local_heads(m), s));
  ST_CHECK(row_parallel(m, a->attproj, &v.attproj, &v.atty, u, GPT_ATTPROJ_W, GPT_ATTPROJ_B));
  ST_CHECK(kernel_residual_forward(kb, &v.res2, &v.x, &v.attproj, s));
  w = GPT_P(m, u, GPT_LN2_W);
  b = GPT_P(m, u, GPT_LN2_B);
  ST_CHECK(kernel_layernorm_forward(kb, &v.ln2, &v.ln2_mean, &v.ln2_rstd, &v.res2, &w, &b, s));
  w = GPT_P(m, u, GPT_FC_W);
  b = GPT_P(m, u, GPT_FC_B);
  ST_CHECK(kernel_matmul_forward(kb, &v.fch, &v.ln2, &w, &b, s));
  ST_CHECK(kernel_gelu_forward(kb, &v.fch_gelu, &v.fch, s));
  ST_CHECK(row_parallel(m, a->fcproj, &v.fcproj, &v.fch_gelu, u, GPT_FCPROJ_W, GPT_FCPROJ_B));
  return kernel_residual_forward(kb, &v.res3, &v.res2, &v.fcproj, s);
}

/* Copies the host tokens into the model's device buffers. */
static st_status upload_tokens(gpt_model *m, const int32_t *inputs, const int32_t *targets) {
  size_t bytes = (size_t)m->B * m->T * sizeof(int32_t);
  ST_CHECK(stream_memcpy(&m->stream, m->acts.inputs, inputs, bytes));
  return stream_memcpy(&m->stream, m->acts.targets, targets, bytes);
}

st_status gpt_forward(gpt_model *m, const int32_t *inputs, const int32_t *targets, float *loss) {
  const kernel_backend *kb = m->kb;
  const st_stream *s = &m->stream;
  const gpt_config *c = &m->cfg;
  const int64_t BT = (int64_t)m->B * m->T, C = c->n_embd;
  const int final_unit = m->n_units - 1;
  gpt_acts *a = &m->acts;
  ST_CHECK(upload_tokens(m, inputs, targets));
  const int depth = m->par.prefetch;
  ST_CHECK(prefetch_acquire(m->units, m->n_units, 0, +1, depth));

  const int64_t enc_shape[3] = {m->B, m->T, C};
  st_tensor encoded;
  ST_CHECK(tensor_make(&encoded, a->encoded, ST_FP32, m->dev->backend->kind, 3, enc_shape));
  st_tensor wte = GPT_P(m, 0, GPT_WTE), wpe = GPT_P(m, 0, GPT_WPE);
  ST_CHECK(kernel_embedding_forward(kb, &encoded, a->inputs, &wte, &wpe, s));

  float *x = a->encoded;
  for (int l = 0; l < c->n_layer; l++) {
    ST_CHECK(prefetch_acquire(m->units, m->n_units, 1 + l, +1, depth));
    ST_CHECK(block_forward(m, l, x));
    if (m->par.reshard_after_forward) unit_release(&m->units[1 + l]);
    x = a->layers[l].res3;
  }
  ST_CHECK(prefetch_acquire(m->units, m->n_units, final_unit, +1, depth));

  st_tensor xt = gpt_t2(m, x, BT, C), lnf = gpt_t2(m, a->lnf, BT, C),
            mean = gpt_t1(m, a->lnf_mean, BT), rstd = gpt_t1(m, a->lnf_rstd, BT),
            logits = gpt_t2(m, a->logits, BT, c->vocab_padded), losses = gpt_t1(m, a->losses, BT);
  st_tensor w = GPT_P(m, final_unit, GPT_LNF_W), b = GPT_P(m, final_unit, GPT_LNF_B);
  ST_CHECK(kernel_layernorm_forward(kb, &lnf, &mean, &rstd, &xt, &w, &b, s));
  ST_CHECK(kernel_matmul_wt_forward(kb, &logits, &lnf, &wte, s));
  ST_CHECK(kernel_classifier(kb, &losses, NULL, &logits, a->targets, c->vocab, 0.0f, s));

  /* The mean is taken on the host in double: BT is small next to the logits. */
  float *host_losses = NULL;
  ST_CHECK(
      mem_alloc((void **)&host_losses, (size_t)BT * sizeof(float), MEM_HOST, MEM_WORKSPACE, NULL));
  st_status status = stream_memcpy(s, host_losses, a->losses, (size_t)BT * sizeof(float));
  if (status == ST_OK) status = stream_sync(s);
  double sum = 0;
  for (int64_t i = 0; status == ST_OK && i < BT; i++) sum += host_losses[i];
  mem_free(host_losses);
  *loss = (float)(sum / (double)BT);
  return status;
}
