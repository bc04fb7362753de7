/* gpt_backward.c - the GPT backward pass. Every kernel backward ADDS into its gradients, so:
 * parameter gradients accumulate over micro-batches until gpt_zero_grads; one buffer (dres)
 * carries the residual stream's gradient, to which each LayerNorm branch adds; and each
 * intermediate gradient buffer is zeroed right before the one op that starts its sum.
 *
 * Units are visited in reverse, gathered with look-ahead towards the embedding; when `reduce`
 * is set (last micro-batch) a unit's gradient reduction starts right after its backward, and at
 * stage 3 its full parameters are released. */
#include "core/error.h"
#include "engine/gpt_internal.h"
#include "sharding/prefetch.h"

/* Zeroes a gradient buffer before the one op that starts its sum. */
static st_status zero_view(gpt_model *m, const st_tensor *t) {
  return stream_memset(&m->stream, t->data, 0, tensor_nbytes(t));
}

/* On entry dres holds d(block output); on exit d(block input). */
static st_status block_backward(gpt_model *m, int l, float *x_in) {
  const kernel_backend *kb = m->kb;
  const st_stream *s = &m->stream;
  const int u = 1 + l;
  gpt_layer_views v;
  gpt_layer_views_make(m, l, x_in, &v);
  st_tensor w, dw, db;

  /* MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))); d fcproj = dres. */
  w = GPT_P(m, u, GPT_FCPROJ_W);
  dw = GPT_G(m, u, GPT_FCPROJ_W);
  db = GPT_G(m, u, GPT_FCPROJ_B);
  ST_CHECK(zero_view(m, &v.dfch_gelu));
  ST_CHECK(kernel_matmul_backward(kb, &v.dfch_gelu, &dw, &db, &v.dres, &v.fch_gelu, &w, s));
  ST_CHECK(zero_view(m, &v.dfch));
  ST_CHECK(kernel_gelu_backward(kb, &v.dfch, &v.dfch_gelu, &v.fch, s));
  w = GPT_P(m, u, GPT_FC_W);
  dw = GPT_G(m, u, GPT_FC_W);
  db = GPT_G(m, u, GPT_FC_B);
  ST_CHECK(zero_view(m, &v.dln));
  ST_CHECK(kernel_matmul_backward(kb, &v.dln, &dw, &db, &v.dfch, &v.ln2, &w, s));
  ST_CHECK(gpt_tp_sum(m, v.dln.data));
  w = GPT_P(m, u, GPT_LN2_W);
  dw = GPT_G(m, u, GPT_LN2_W);
  db = GPT_G(m, u, GPT_LN2_B);
  ST_CHECK(kernel_layernorm_backward(kb, &v.dres, &dw, &db, &v.dln, &v.res2, &w, &v.ln2_mean,
                                     &v.ln2_rstd, s));

  /* Attention: res2 = x + attproj(attn(qkv(ln1(x)))); d attproj = dres (now d res2). */
  w = GPT_P(m, u, GPT_ATTPROJ_W);
  dw = GPT_G(m, u, GPT_ATTPROJ_W);
  db = GPT_G(m, u, GPT_ATTPROJ_B);
  ST_CHECK(zero_view(m, &v.datty));
  ST_CHECK(kernel_matmul_backward(kb, &v.datty, &dw, &db, &v.dres, &v.atty, &w, s));
  ST_CHECK(zero_view(m, &v.dqkv));
  ST_CHECK(kernel_attention_backward(kb, &v.dqkv3, &v.datty3, &v.qkv3, &v.probs, s));
  w = GPT_P(m, u, GPT_QKV_W);
  dw = GPT_G(m, u, GPT_QKV_W);
  db = GPT_G(m, u, GPT_QKV_B);
  ST_CHECK(zero_view(m, &v.dln));
  ST_CHECK(kernel_matmul_backward(kb, &v.dln, &dw, &db, &v.dqkv, &v.ln1, &w, s));
  ST_CHECK(gpt_tp_sum(m, v.dln.data));
  w = GPT_P(m, u, GPT_LN1_W);
  dw = GPT_G(m, u, GPT_LN1_W);
  db = GPT_G(m, u, GPT_LN1_B);
  return kernel_layernorm_backward(kb, &v.dres, &dw, &db, &v.dln, &v.x, &w, &v.ln1_mean,
                                   &v.ln1_rstd, s);
}

/* A unit's backward is done: start its reduction (last micro-batch) and let it go. The
 * reduction of the unit before it in the backward (u + 1) is finished here, so at most two
 * units' full gradients exist at once at stages 2-3. The embedding (unit 0) is the exception:
 * the tied head adds to its gradient at the start of the backward. */
static st_status finish_unit(gpt_model *m, int u, int reduce) {
  if (reduce) {
    ST_CHECK(unit_reduce_start(&m->units[u]));
    if (u + 1 < m->n_units) ST_CHECK(unit_reduce_wait(&m->units[u + 1]));
  }
  unit_release(&m->units[u]);
  return ST_OK;
}

st_status gpt_backward(gpt_model *m, float dloss_scale, int reduce) {
  const kernel_backend *kb = m->kb;
  const st_stream *s = &m->stream;
  const gpt_config *c = &m->cfg;
  const int64_t BT = (int64_t)m->B * m->T, C = c->n_embd;
  const int final_unit = m->n_units - 1;
  gpt_acts *g = &m->acts;
  float *x_last = c->n_layer ? g->layers[c->n_layer - 1].res3 : g->encoded;
  ST_CHECK(unit_grads_ensure(&m->units[0]));
  ST_CHECK(unit_grads_ensure(&m->units[final_unit]));

  /* Loss and tied head: the logits buffer is reused in place for its own gradient. */
  st_tensor logits = gpt_t2(m, g->logits, BT, c->vocab_padded), lnf = gpt_t2(m, g->lnf, BT, C),
            dln = gpt_t2(m, g->dln, BT, C), dres = gpt_t2(m, g->dres, BT, C),
            x = gpt_t2(m, x_last, BT, C), mean = gpt_t1(m, g->lnf_mean, BT),
            rstd = gpt_t1(m, g->lnf_rstd, BT);
  ST_CHECK(
      kernel_crossentropy_backward(kb, &logits, &logits, g->targets, c->vocab, dloss_scale, s));
  st_tensor wte = GPT_P(m, 0, GPT_WTE), dwte = GPT_G(m, 0, GPT_WTE), dwpe = GPT_G(m, 0, GPT_WPE);
  ST_CHECK(zero_view(m, &dln));
  ST_CHECK(kernel_matmul_wt_backward(kb, &dln, &dwte, &logits, &lnf, &wte, s));
  st_tensor w = GPT_P(m, final_unit, GPT_LNF_W), dw = GPT_G(m, final_unit, GPT_LNF_W),
            db = GPT_G(m, final_unit, GPT_LNF_B);
  ST_CHECK(zero_view(m, &dres));
  ST_CHECK(kernel_layernorm_backward(kb, &dres, &dw, &db, &dln, &x, &w, &mean, &rstd, s));
  ST_CHECK(finish_unit(m, final_unit, reduce));

  for (int l = c->n_layer - 1; l >= 0; l--) {
    ST_CHECK(prefetch_acquire(m->units, m->n_units, 1 + l, -1, m->par.prefetch));
    ST_CHECK(unit_grads_ensure(&m->units[1 + l]));
    ST_CHECK(block_backward(m, l, l ? g->layers[l - 1].res3 : g->encoded));
    ST_CHECK(finish_unit(m, 1 + l, reduce));
  }

  const int64_t enc_shape[3] = {m->B, m->T, C};
  st_tensor denc;
  ST_CHECK(tensor_make(&denc, g->dres, ST_FP32, m->dev->backend->kind, 3, enc_shape));
  ST_CHECK(kernel_embedding_backward(kb, &dwte, &dwpe, &denc, g->inputs, s));
  return finish_unit(m, 0, reduce);
}
