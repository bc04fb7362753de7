/* gpt_backward.c - the GPT backward pass. The kernel backwards ADD into their gradients
 * (kernels.h), except a linear layer's and the attention's input gradients, which they write:
 * parameter gradients accumulate over micro-batches until gpt_zero_grads, and one buffer (dres)
 * carries the residual stream's gradient, to which each LayerNorm branch adds, zeroed where
 * its sum starts.
 *
 * Before each block's backward, what activation recompute did not keep of it is computed again
 * (gpt_recompute.c) with the block's parameters already gathered for its backward.
 *
 * Units are visited in reverse, gathered with look-ahead towards the embedding; when `reduce`
 * is set (last micro-batch) a unit's gradient reduction starts right after its backward; then
 * the unit is released (its fp32 compute copy, and at stage 3 its full parameters). */
#include "core/error.h"
#include "engine/model/gpt_internal.h"
#include "engine/model/gpt_tp.h"
#include "sharding/prefetch.h"

/* The backward of unit u's linear layer (weight w_index, bias b_index): dinp receives d(inp);
 * the layer's weight and bias gradients accumulate. */
static st_status linear_backward(gpt_model *m, int u, int w_index, int b_index,
                                 const st_tensor *dinp, const st_tensor *dout,
                                 const st_tensor *inp) {
  st_tensor w = GPT_P(m, u, w_index), dw = GPT_G(m, u, w_index), db = GPT_G(m, u, b_index);
  return kernel_matmul_backward(m->kb, dinp, &dw, &db, dout, inp, &w, &m->stream);
}

/* The backward of unit u's LayerNorm (weight w_index, bias b_index): d(inp) is ADDED to
 * dres, the residual stream's gradient, and the norm's gradients accumulate. */
static st_status norm_backward(gpt_model *m, int u, int w_index, int b_index, const st_tensor *dres,
                               const st_tensor *dout, const st_tensor *inp, const st_tensor *mean,
                               const st_tensor *rstd) {
  st_tensor w = GPT_P(m, u, w_index), dw = GPT_G(m, u, w_index), db = GPT_G(m, u, b_index);
  return kernel_layernorm_backward(m->kb, dres, &dw, &db, dout, inp, &w, mean, rstd, &m->stream);
}

/* On entry dres holds d(block output); on exit d(block input). */
static st_status block_backward(gpt_model *m, int l, void *x_in) {
  const int u = 1 + l;
  gpt_layer_views v;
  gpt_layer_views_make(m, l, x_in, &v);

  /* MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))); d fcproj = dres. The GELU epilogue's
   * backward turns d gelu (dfch_gelu) into d fch in place before fc's products. */
  ST_CHECK(linear_backward(m, u, GPT_FCPROJ_W, GPT_FCPROJ_B, &v.dfch_gelu, &v.dres, &v.fch_gelu));
  st_tensor w = GPT_P(m, u, GPT_FC_W), dw = GPT_G(m, u, GPT_FC_W), db = GPT_G(m, u, GPT_FC_B);
  ST_CHECK(kernel_matmul_gelu_backward(m->kb, &v.dln, &dw, &db, &v.dfch_gelu, &v.fch, &v.ln2, &w,
                                       &m->stream));
  ST_CHECK(gpt_tp_f_backward(m, v.dln.data));
  ST_CHECK(norm_backward(m, u, GPT_LN2_W, GPT_LN2_B, &v.dres, &v.dln, &v.res2, &v.ln2_mean,
                         &v.ln2_rstd));

  /* Attention: res2 = x + attproj(attn(qkv(ln1(x)))); d attproj = dres (now d res2). */
  ST_CHECK(linear_backward(m, u, GPT_ATTPROJ_W, GPT_ATTPROJ_B, &v.datty, &v.dres, &v.atty));
  ST_CHECK(kernel_attention_backward(m->kb, &v.dqkv3, &v.datty3, &v.qkv3, &v.atty3, &v.att_state,
                                     gpt_local_heads(m), &m->stream));
  ST_CHECK(linear_backward(m, u, GPT_QKV_W, GPT_QKV_B, &v.dln, &v.dqkv, &v.ln1));
  ST_CHECK(gpt_tp_f_backward(m, v.dln.data));
  return norm_backward(m, u, GPT_LN1_W, GPT_LN1_B, &v.dres, &v.dln, &v.x, &v.ln1_mean, &v.ln1_rstd);
}

/* A unit's backward is done: end its gradients' use, on the last micro-batch finish the
 * reduction of the unit before it in the backward (u + 1) and start its own
 * (unit_reduce_handoff), and let it go. The embedding (unit 0) is the exception: the tied head
 * adds to its gradient in the training forward (gpt_head.c). */
static st_status finish_unit(gpt_model *m, int u, int reduce) {
  ST_CHECK(unit_grads_end(&m->units[u]));
  if (reduce) {
    ST_CHECK(unit_reduce_handoff(&m->units[u], u + 1 < m->n_units ? &m->units[u + 1] : NULL));
  }
  unit_release(&m->units[u]);
  return ST_OK;
}

st_status gpt_backward(gpt_model *m, int reduce) {
  const kernel_backend *kb = m->kb;
  const st_stream *s = &m->stream;
  const gpt_config *c = &m->cfg;
  const int64_t BT = (int64_t)m->B * m->T, C = c->n_embd;
  const int final_unit = m->n_units - 1;
  gpt_acts *g = &m->acts;
  void *x_last = c->n_layer ? g->layers[c->n_layer - 1].res3 : g->encoded;
  ST_CHECK(unit_grads_begin(&m->units[final_unit]));

  /* The final norm, from the d(lnf) the forward's head left in dln (gpt_head.c, which also
   * began the embedding unit's backward with wte's gradient from the head). */
  st_tensor dln = gpt_a2(m, g->dln, BT, C), dres = gpt_a2(m, g->dres, BT, C),
            x = gpt_a2(m, x_last, BT, C), mean = gpt_t1(m, g->lnf_mean, BT),
            rstd = gpt_t1(m, g->lnf_rstd, BT);
  st_tensor dwte = GPT_G(m, 0, GPT_WTE), dwpe = GPT_G(m, 0, GPT_WPE);
  ST_CHECK(stream_memset(s, dres.data, 0, tensor_nbytes(&dres))); /* the residual's sum starts */
  ST_CHECK(norm_backward(m, final_unit, GPT_LNF_W, GPT_LNF_B, &dres, &dln, &x, &mean, &rstd));
  ST_CHECK(finish_unit(m, final_unit, reduce));

  for (int l = c->n_layer - 1; l >= 0; l--) {
    ST_CHECK(prefetch_acquire(m->units, m->n_units, 1 + l, -1, m->par.prefetch));
    ST_CHECK(unit_grads_begin(&m->units[1 + l]));
    void *x_in = l ? g->layers[l - 1].res3 : g->encoded;
    ST_CHECK(gpt_recompute_layer(m, l, x_in));
    ST_CHECK(block_backward(m, l, x_in));
    ST_CHECK(finish_unit(m, 1 + l, reduce));
  }

  st_tensor denc = gpt_a3(m, g->dres, C);
  ST_CHECK(kernel_embedding_backward(kb, &dwte, &dwpe, &denc, g->inputs, s));
  return finish_unit(m, 0, reduce);
}
