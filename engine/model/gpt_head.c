/* gpt_head.c - the tied LM head and its loss, a chunk of rows at a time ("fused linear
 * cross-entropy"). For each chunk of acts.head_rows rows of the final norm's output lnf:
 * logits = lnf @ wte^T into the one chunk buffer (acts.logits), the classifier's per-token
 * losses and, in training, its dlogits in place of the logits, and at once the head's backward
 * for that chunk: its rows of d(lnf) written into acts.dln, where gpt_backward continues with the
 * final norm's backward, and dlogits^T @ lnf added to wte's gradient. No logits are recomputed and
 * no more than one chunk of them exists (d12 at 16 x 1024 tokens: 96 MB of bf16 instead of 1.6 GB).
 *
 * wte's gradient is thus written in the training forward: the embedding unit's backward begins
 * here (unit_grads_begin), and ends with the embedding's own backward, the last op of
 * gpt_backward, which also starts its reduction on the last micro-batch. Its gradients
 * accumulate over micro-batches like every other unit's: nothing between the forward and the
 * backward reads or reduces them. */
#include "core/error.h"
#include "engine/model/gpt_internal.h"

/* Rows of logits per chunk: no more elements than the largest per-layer activation, the MLP's
 * B T x 4C/tp (so the head never sets the activation peak), rounded down to a multiple of 64
 * rows (matmul tiles, and every chunk of a bf16 buffer 128-byte aligned), at least 64 rows and at
 * most the micro-batch's B T. */
int64_t gpt_head_rows(const gpt_config *cfg, int B, int T, int tp) {
  const int64_t tokens = (int64_t)B * T, multiple = 64;
  const int64_t mlp = tokens * 4 * (cfg->n_embd / tp);
  int64_t rows = mlp / cfg->vocab_padded / multiple * multiple;
  if (rows < multiple) rows = multiple;
  return rows < tokens ? rows : tokens;
}

st_status gpt_set_head_rows(gpt_model *m, int64_t rows) {
  const int64_t planned = gpt_head_rows(&m->cfg, m->B, m->T, m->tp_size);
  if (rows < 1 || rows > planned) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%lld rows of logits per chunk: 1 to %lld fit the planned chunk buffer",
                    (long long)rows, (long long)planned);
  }
  m->acts.head_rows = rows;
  return ST_OK;
}

/* Rows [first, first + rows) of an activation buffer `width` elements wide. */
static st_tensor rows_of(const gpt_model *m, void *base, int64_t first, int64_t rows,
                         int64_t width) {
  return gpt_a2(m, (char *)base + first * width * (int64_t)dtype_size(m->act), rows, width);
}

st_status gpt_head_logits(gpt_model *m, int64_t first, int64_t rows, st_tensor *out) {
  const int64_t tokens = (int64_t)m->B * m->T;
  if (first < 0 || rows < 1 || rows > m->acts.head_rows || first + rows > tokens) {
    return st_error(ST_ERR_INVALID_ARG,
                    "logits of rows %lld to %lld: a call covers 1 to %lld of the %lld rows",
                    (long long)first, (long long)(first + rows), (long long)m->acts.head_rows,
                    (long long)tokens);
  }
  const st_tensor lnf = rows_of(m, m->acts.lnf, first, rows, m->cfg.n_embd),
                  wte = GPT_P(m, 0, GPT_WTE);
  *out = gpt_a2(m, m->acts.logits, rows, m->cfg.vocab_padded);
  return kernel_matmul_wt_forward(m->kb, out, &lnf, &wte, &m->stream);
}

st_status gpt_head_forward(gpt_model *m, float dloss_scale) {
  const int64_t tokens = (int64_t)m->B * m->T, C = m->cfg.n_embd;
  const int training = dloss_scale > 0;
  gpt_acts *a = &m->acts;
  if (training) ST_CHECK(unit_grads_begin(&m->units[0]));
  for (int64_t first = 0; first < tokens; first += a->head_rows) {
    const int64_t rows = tokens - first < a->head_rows ? tokens - first : a->head_rows;
    st_tensor logits, losses = gpt_t1(m, a->losses + first, rows);
    ST_CHECK(gpt_head_logits(m, first, rows, &logits));
    ST_CHECK(kernel_classifier(m->kb, &losses, training ? &logits : NULL, &logits,
                               a->targets + first, m->cfg.vocab, dloss_scale, &m->stream));
    if (!training) continue;
    const st_tensor lnf = rows_of(m, a->lnf, first, rows, C),
                    dlnf = rows_of(m, a->dln, first, rows, C), wte = GPT_P(m, 0, GPT_WTE),
                    dwte = GPT_G(m, 0, GPT_WTE);
    ST_CHECK(kernel_matmul_wt_backward(m->kb, &dlnf, &dwte, &logits, &lnf, &wte, &m->stream));
  }
  return ST_OK;
}
