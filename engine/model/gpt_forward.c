/* gpt_forward.c - the GPT forward pass over one micro-batch, keeping every activation the
 * backward needs, and the loss. Block l reads the residual stream from the previous block's
 * res3 (the embedding output for l = 0) and writes its own res2; each residual add is fused
 * into the LayerNorm that follows it, so block l's res3 is written by block l + 1's first norm
 * (the final norm for the last block).
 *
 * Units are gathered in order with look-ahead (prefetch_acquire); a block is released after
 * its forward (stage 3: its full parameters; any stage: its fp32 compute copy) unless
 * reshard-after-forward is off. The embedding and final units stay gathered: the tied head
 * needs wte at the end of the forward, and the embedding's backward at the end of the backward.
 * The head, its loss and, in training, its backward run chunk by chunk (gpt_head.c). */
#include "core/error.h"
#include "engine/model/gpt_internal.h"
#include "engine/model/gpt_tp.h"
#include "sharding/prefetch.h"

/* out = inp @ W (+ b once): a row-parallel layer. Its bias is replicated, so only tp rank 0
 * adds it before the partial outputs are summed. */
static st_status row_parallel(gpt_model *m, void *out_data, const st_tensor *out,
                              const st_tensor *inp, int u, int w_index, int b_index) {
  st_tensor w = GPT_P(m, u, w_index), b = GPT_P(m, u, b_index);
  ST_CHECK(kernel_matmul_forward(m->kb, out, inp, &w, m->tp_rank == 0 ? &b : NULL, &m->stream));
  return gpt_tp_g_forward(m, out_data);
}

/* The LayerNorm that opens block l, or the final unit's for l = n_layer, over the residual
 * stream: for l = 0 the embedding's output; otherwise block l - 1's output res3 = res2 +
 * fcproj, whose add is fused into this norm and written for the backward. */
static st_status open_norm(gpt_model *m, int l, int u, int w_index, int b_index,
                           const st_tensor *out, const st_tensor *mean, const st_tensor *rstd) {
  const int64_t BT = (int64_t)m->B * m->T, C = m->cfg.n_embd;
  st_tensor w = GPT_P(m, u, w_index), b = GPT_P(m, u, b_index);
  if (l == 0) {
    st_tensor x = gpt_a2(m, m->acts.encoded, BT, C);
    return kernel_layernorm_forward(m->kb, out, mean, rstd, &x, &w, &b, &m->stream);
  }
  const gpt_layer_acts *prev = &m->acts.layers[l - 1];
  st_tensor res3 = gpt_a2(m, prev->res3, BT, C), res2 = gpt_a2(m, prev->res2, BT, C),
            fcproj = gpt_a2(m, prev->fcproj, BT, C);
  return kernel_layernorm_residual_forward(m->kb, &res3, out, mean, rstd, &res2, &fcproj, &w, &b,
                                           &m->stream);
}

st_status gpt_block_forward_from_ln1(gpt_model *m, int l, const gpt_layer_views *v,
                                     int with_output) {
  const kernel_backend *kb = m->kb;
  const st_stream *s = &m->stream;
  const int u = 1 + l;
  const gpt_layer_acts *a = &m->acts.layers[l];
  st_tensor w = GPT_P(m, u, GPT_QKV_W), b = GPT_P(m, u, GPT_QKV_B);
  ST_CHECK(kernel_matmul_forward(kb, &v->qkv, &v->ln1, &w, &b, s));
  ST_CHECK(kernel_attention_forward(kb, &v->atty3, &v->att_state, &v->qkv3, gpt_local_heads(m), s));
  ST_CHECK(row_parallel(m, a->attproj, &v->attproj, &v->atty, u, GPT_ATTPROJ_W, GPT_ATTPROJ_B));
  w = GPT_P(m, u, GPT_LN2_W);
  b = GPT_P(m, u, GPT_LN2_B);
  ST_CHECK(kernel_layernorm_residual_forward(kb, &v->res2, &v->ln2, &v->ln2_mean, &v->ln2_rstd,
                                             &v->x, &v->attproj, &w, &b, s));
  w = GPT_P(m, u, GPT_FC_W);
  b = GPT_P(m, u, GPT_FC_B);
  ST_CHECK(kernel_matmul_gelu_forward(kb, &v->fch_gelu, &v->fch, &v->ln2, &w, &b, s));
  if (!with_output) return ST_OK;
  return row_parallel(m, a->fcproj, &v->fcproj, &v->fch_gelu, u, GPT_FCPROJ_W, GPT_FCPROJ_B);
}

/* Block l up to its MLP's output fcproj; the residual add after it is fused into the next
 * norm (open_norm). */
static st_status block_forward(gpt_model *m, int l, void *x_in) {
  gpt_layer_views v;
  gpt_layer_views_make(m, l, x_in, &v);
  ST_CHECK(open_norm(m, l, 1 + l, GPT_LN1_W, GPT_LN1_B, &v.ln1, &v.ln1_mean, &v.ln1_rstd));
  return gpt_block_forward_from_ln1(m, l, &v, 1);
}

/* ST_OK when every id of `ids` names a row of the vocabulary: wte's padding rows, which the
 * kernels' own checks allow, would otherwise be trained, and a GPU kernel cannot refuse. */
static st_status check_vocabulary_ids(const gpt_model *m, const char *what, const int32_t *ids) {
  const int64_t count = (int64_t)m->B * m->T;
  for (int64_t i = 0; i < count; i++) {
    if (ids[i] < 0 || ids[i] >= m->cfg.vocab) {
      return st_error(ST_ERR_INVALID_ARG,
                      "gpt_forward: %s %lld is %d, outside the vocabulary [0, %d)", what,
                      (long long)i, ids[i], m->cfg.vocab);
    }
  }
  return ST_OK;
}

/* Copies the host tokens into the model's device buffers, each checked first. */
static st_status upload_tokens(gpt_model *m, const int32_t *inputs, const int32_t *targets) {
  ST_CHECK(check_vocabulary_ids(m, "input token", inputs));
  ST_CHECK(check_vocabulary_ids(m, "target", targets));
  size_t bytes = (size_t)m->B * m->T * sizeof(int32_t);
  ST_CHECK(stream_memcpy(&m->stream, m->acts.inputs, inputs, bytes));
  return stream_memcpy(&m->stream, m->acts.targets, targets, bytes);
}

st_status gpt_forward(gpt_model *m, const int32_t *inputs, const int32_t *targets,
                      float dloss_scale) {
  const kernel_backend *kb = m->kb;
  const st_stream *s = &m->stream;
  const gpt_config *c = &m->cfg;
  const int64_t BT = (int64_t)m->B * m->T, C = c->n_embd;
  const int final_unit = m->n_units - 1;
  gpt_acts *a = &m->acts;
  ST_CHECK(upload_tokens(m, inputs, targets));
  const int depth = m->par.prefetch;
  ST_CHECK(prefetch_acquire(m->units, m->n_units, 0, +1, depth));

  st_tensor encoded = gpt_a3(m, a->encoded, C);
  st_tensor wte = GPT_P(m, 0, GPT_WTE), wpe = GPT_P(m, 0, GPT_WPE);
  ST_CHECK(kernel_embedding_forward(kb, &encoded, a->inputs, &wte, &wpe, s));

  void *x = a->encoded;
  for (int l = 0; l < c->n_layer; l++) {
    ST_CHECK(prefetch_acquire(m->units, m->n_units, 1 + l, +1, depth));
    ST_CHECK(block_forward(m, l, x));
    if (m->par.reshard_after_forward) unit_release(&m->units[1 + l]);
    x = a->layers[l].res3;
  }
  ST_CHECK(prefetch_acquire(m->units, m->n_units, final_unit, +1, depth));

  st_tensor lnf = gpt_a2(m, a->lnf, BT, C), mean = gpt_t1(m, a->lnf_mean, BT),
            rstd = gpt_t1(m, a->lnf_rstd, BT);
  ST_CHECK(open_norm(m, c->n_layer, final_unit, GPT_LNF_W, GPT_LNF_B, &lnf, &mean, &rstd));
  return gpt_head_forward(m, dloss_scale);
}

st_status gpt_loss_sum(gpt_model *m, const st_tensor *out) {
  st_tensor losses = gpt_t1(m, m->acts.losses, (int64_t)m->B * m->T);
  return kernel_sum(m->kb, out, &losses, &m->stream);
}
