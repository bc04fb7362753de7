/* gpt_kv.c - the cached generation forward (gpt_kv.h). Each call runs its n new tokens through
 * the blocks as gpt_forward's block_forward does (each residual add fused into the norm after
 * it), with one set of n-row buffers shared by every layer (nothing is kept for a backward) and
 * kernel_attention_cached_forward in place of the full-sequence attention; only the rows whose
 * logits are asked for go through the final LayerNorm and the tied head.
 *
 * Memory: the cache (MEM_ACTIVATIONS, in the activation dtype) holds per layer max_seq rows of
 * keys and then of values, C wide; the scratch (MEM_WORKSPACE) holds the n-row buffers, the
 * logits rows and the tokens. Both are the model's device memory, owned by the gpt_kv and freed
 * at destroy. */
#include "engine/model/gpt_kv.h"

#include "core/alloc.h"
#include "core/error.h"
#include "engine/model/gpt_internal.h"

/* The cache, the activations and the logits are in the model's activation dtype (void *); the
 * statistics in fp32. */
struct gpt_kv {
  gpt_model *model;
  int max_tokens, max_logits;
  int length;    /* positions cached */
  void *cache;   /* per layer: keys [max_seq, C], then values [max_seq, C] */
  void *scratch; /* the buffers below */
  void *x, *ln, *qkv, *atty, *proj, *fch, *fch_gelu, *logits;
  float *mean, *rstd;
  float *logits_f32; /* the logits converted for the host, where they are not fp32 */
  int32_t *tokens;
};

/* The scratch buffers of one cached forward of up to max_tokens positions. */
static void carve_scratch(gpt_carve *c, gpt_kv *kv) {
  const gpt_model *m = kv->model;
  const int64_t n = kv->max_tokens, C = m->cfg.n_embd;
  const int64_t logits = (int64_t)kv->max_logits * m->cfg.vocab_padded;
  const size_t a = dtype_size(m->act), f = sizeof(float);
  kv->x = gpt_carve_add(c, n * C, a);
  kv->ln = gpt_carve_add(c, n * C, a);
  kv->mean = gpt_carve_add(c, n, f);
  kv->rstd = gpt_carve_add(c, n, f);
  kv->qkv = gpt_carve_add(c, n * 3 * C, a);
  kv->atty = gpt_carve_add(c, n * C, a);
  kv->proj = gpt_carve_add(c, n * C, a);
  kv->fch = gpt_carve_add(c, n * 4 * C, a);
  kv->fch_gelu = gpt_carve_add(c, n * 4 * C, a);
  kv->logits = gpt_carve_add(c, logits, a);
  kv->logits_f32 = m->act == ST_FP32 ? NULL : gpt_carve_add(c, logits, f);
  kv->tokens = gpt_carve_add(c, n, sizeof(int32_t));
}

/* Row `row` of a buffer of rows `width` activations wide. */
static void *row_at(const gpt_model *m, void *base, int64_t row, int64_t width) {
  return (char *)base + (size_t)(row * width) * dtype_size(m->act);
}

st_status gpt_kv_create(gpt_kv **out, gpt_model *m, int max_tokens, int max_logits) {
  *out = NULL;
  const gpt_config *cfg = &m->cfg;
  if (m->tp_size != 1) {
    return st_error(ST_ERR_UNSUPPORTED,
                    "generation runs on one tensor-parallel rank; this model is split over %d",
                    m->tp_size);
  }
  if (max_tokens < 1 || max_tokens > cfg->max_seq || max_logits < 1 || max_logits > max_tokens) {
    return st_error(ST_ERR_INVALID_ARG,
                    "a key/value cache for %d tokens and %d logits per call: need 1 <= logits <= "
                    "tokens <= %d positions",
                    max_tokens, max_logits, cfg->max_seq);
  }
  gpt_kv *kv = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&kv, sizeof *kv, MEM_HOST, MEM_WORKSPACE, NULL));
  *kv = (gpt_kv){.model = m, .max_tokens = max_tokens, .max_logits = max_logits};
  const size_t cache_bytes =
      (size_t)2 * cfg->n_layer * cfg->max_seq * (size_t)cfg->n_embd * dtype_size(m->act);
  gpt_carve measure = {0};
  carve_scratch(&measure, kv);
  st_status status;
  ST_CHECK_GOTO(mem_alloc(&kv->cache, cache_bytes, MEM_DEVICE, MEM_ACTIVATIONS, m->dev), status,
                fail);
  ST_CHECK_GOTO(mem_alloc(&kv->scratch, (size_t)measure.total, MEM_DEVICE, MEM_WORKSPACE, m->dev),
                status, fail);
  gpt_carve place = {.base = kv->scratch};
  carve_scratch(&place, kv);
  *out = kv;
  return ST_OK;
fail:
  gpt_kv_destroy(kv);
  return status;
}

void gpt_kv_destroy(gpt_kv *kv) {
  if (!kv) return;
  for (int u = kv->model->n_units - 1; u >= 0; u--) unit_release(&kv->model->units[u]);
  mem_free(kv->scratch);
  mem_free(kv->cache);
  mem_free(kv);
}

const gpt_config *gpt_kv_config(const gpt_kv *kv) { return &kv->model->cfg; }

int gpt_kv_max_tokens(const gpt_kv *kv) { return kv->max_tokens; }

int gpt_kv_length(const gpt_kv *kv) { return kv->length; }

void gpt_kv_clear(gpt_kv *kv) { kv->length = 0; }

/* Layer l's keys (values follow max_seq rows further on). */
static void *layer_keys(const gpt_kv *kv, int l) {
  const gpt_config *c = &kv->model->cfg;
  return row_at(kv->model, kv->cache, (int64_t)2 * l * c->max_seq, c->n_embd);
}

static st_status check_call(const gpt_kv *kv, const int32_t *tokens, int n, int n_logits) {
  const gpt_config *c = &kv->model->cfg;
  if (n < 1 || n > kv->max_tokens) {
    return st_error(ST_ERR_INVALID_ARG, "%d new tokens: this key/value cache takes 1 to %d a call",
                    n, kv->max_tokens);
  }
  if (n_logits < 1 || n_logits > n || n_logits > kv->max_logits) {
    return st_error(ST_ERR_INVALID_ARG, "logits of %d of %d new tokens: 1 to %d can be returned",
                    n_logits, n, n < kv->max_logits ? n : kv->max_logits);
  }
  if (n > c->max_seq - kv->length) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%d new tokens after %d: the sequence would pass the model's %d positions", n,
                    kv->length, c->max_seq);
  }
  for (int i = 0; i < n; i++) {
    if (tokens[i] < 0 || tokens[i] >= c->vocab) {
      return st_error(ST_ERR_INVALID_ARG,
                      "token %d (new token %d) is outside the vocabulary [0, %d)", (int)tokens[i],
                      i, c->vocab);
    }
  }
  return ST_OK;
}

/* x[n, C] = wte[tokens] + wpe[length + t]: the embedding op reads positions from 0, so it is
 * given wpe from row `length` on. */
static st_status embed(gpt_kv *kv, int n) {
  gpt_model *m = kv->model;
  const int64_t C = m->cfg.n_embd, shape[3] = {1, n, C};
  st_tensor x, wte = GPT_P(m, 0, GPT_WTE), wpe = GPT_P(m, 0, GPT_WPE);
  ST_CHECK(tensor_make(&x, kv->x, m->act, m->dev->backend->kind, 3, shape));
  wpe.data = (char *)wpe.data + (size_t)kv->length * C * dtype_size(wpe.dtype);
  wpe.shape[0] -= kv->length;
  return kernel_embedding_forward(m->kb, &x, kv->tokens, &wte, &wpe, &m->stream);
}

/* ln, mean and rstd of rows [first, first + rows) of the residual stream x, with unit u's norm
 * (w_index, b_index). With `add`, the branch output in proj is first added into x in place
 * (fused with the norm): the residual add that closes the sublayer before it. */
static st_status norm(gpt_kv *kv, int u, int w_index, int b_index, int first, int rows, int add) {
  gpt_model *m = kv->model;
  const int64_t C = m->cfg.n_embd;
  st_tensor x = gpt_a2(m, row_at(m, kv->x, first, C), rows, C), ln = gpt_a2(m, kv->ln, rows, C),
            mean = gpt_t1(m, kv->mean, rows), rstd = gpt_t1(m, kv->rstd, rows),
            proj = gpt_a2(m, row_at(m, kv->proj, first, C), rows, C);
  st_tensor w = GPT_P(m, u, w_index), b = GPT_P(m, u, b_index);
  if (!add) return kernel_layernorm_forward(m->kb, &ln, &mean, &rstd, &x, &w, &b, &m->stream);
  return kernel_layernorm_residual_forward(m->kb, &x, &ln, &mean, &rstd, &x, &proj, &w, &b,
                                           &m->stream);
}

/* Block l up to its MLP's output in proj; the residual add after it is fused into the next
 * norm. */
static st_status block(gpt_kv *kv, int l, int n) {
  gpt_model *m = kv->model;
  const kernel_backend *kb = m->kb;
  const st_stream *s = &m->stream;
  const int u = 1 + l;
  const int64_t C = m->cfg.n_embd, S = m->cfg.max_seq;
  void *keys = layer_keys(kv, l);
  st_tensor ln = gpt_a2(m, kv->ln, n, C), qkv = gpt_a2(m, kv->qkv, n, 3 * C),
            atty = gpt_a2(m, kv->atty, n, C), proj = gpt_a2(m, kv->proj, n, C),
            fch = gpt_a2(m, kv->fch, n, 4 * C), fch_gelu = gpt_a2(m, kv->fch_gelu, n, 4 * C),
            k_cache = gpt_a2(m, keys, S, C), v_cache = gpt_a2(m, row_at(m, keys, S, C), S, C);
  ST_CHECK(norm(kv, u, GPT_LN1_W, GPT_LN1_B, 0, n, l > 0));
  st_tensor w = GPT_P(m, u, GPT_QKV_W), b = GPT_P(m, u, GPT_QKV_B);
  ST_CHECK(kernel_matmul_forward(kb, &qkv, &ln, &w, &b, s));
  ST_CHECK(kernel_attention_cached_forward(kb, &atty, &k_cache, &v_cache, &qkv, kv->length,
                                           m->cfg.n_head, s));
  w = GPT_P(m, u, GPT_ATTPROJ_W);
  b = GPT_P(m, u, GPT_ATTPROJ_B);
  ST_CHECK(kernel_matmul_forward(kb, &proj, &atty, &w, &b, s));
  ST_CHECK(norm(kv, u, GPT_LN2_W, GPT_LN2_B, 0, n, 1));
  w = GPT_P(m, u, GPT_FC_W);
  b = GPT_P(m, u, GPT_FC_B);
  ST_CHECK(kernel_matmul_gelu_forward(kb, &fch_gelu, &fch, &ln, &w, &b, s));
  w = GPT_P(m, u, GPT_FCPROJ_W);
  b = GPT_P(m, u, GPT_FCPROJ_B);
  return kernel_matmul_forward(kb, &proj, &fch_gelu, &w, &b, s);
}

/* Logits of the last n_logits of the n rows: the final LayerNorm (closing the last block's
 * residual add on those rows only), then the tied head; *out receives them in fp32 (converted
 * into logits_f32 where the activations are not fp32). */
static st_status head(gpt_kv *kv, int n, int n_logits, const float **out) {
  gpt_model *m = kv->model;
  const int64_t C = m->cfg.n_embd, Vp = m->cfg.vocab_padded;
  const int final_unit = m->n_units - 1;
  ST_CHECK(norm(kv, final_unit, GPT_LNF_W, GPT_LNF_B, n - n_logits, n_logits, m->cfg.n_layer > 0));
  st_tensor ln = gpt_a2(m, kv->ln, n_logits, C), logits = gpt_a2(m, kv->logits, n_logits, Vp),
            wte = GPT_P(m, 0, GPT_WTE);
  ST_CHECK(kernel_matmul_wt_forward(m->kb, &logits, &ln, &wte, &m->stream));
  *out = kv->logits_f32 ? kv->logits_f32 : kv->logits;
  if (!kv->logits_f32) return ST_OK;
  st_tensor f32 = gpt_t2(m, kv->logits_f32, n_logits, Vp);
  return kernel_cast(m->kb, &f32, &logits, &m->stream);
}

st_status gpt_kv_forward(gpt_kv *kv, const int32_t *tokens, int n, int n_logits, float *logits) {
  gpt_model *m = kv->model;
  const gpt_config *c = &m->cfg;
  ST_CHECK(check_call(kv, tokens, n, n_logits));
  ST_CHECK(stream_memcpy(&m->stream, kv->tokens, tokens, (size_t)n * sizeof(int32_t)));
  /* A no-op once gathered: the units stay gathered until destroy. */
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_gather_wait(&m->units[u]));
  ST_CHECK(embed(kv, n));
  for (int l = 0; l < c->n_layer; l++) ST_CHECK(block(kv, l, n));
  const float *rows = NULL;
  ST_CHECK(head(kv, n, n_logits, &rows));
  /* Copies into the caller's (pageable) memory wait for the stream's work inside the copy
   * call, out of the device-wait bound's reach (core/device.h): the bounded wait first. */
  ST_CHECK(stream_sync(&m->stream));
  for (int r = 0; r < n_logits; r++) {
    ST_CHECK(stream_memcpy(&m->stream, logits + (int64_t)r * c->vocab,
                           rows + (int64_t)r * c->vocab_padded, (size_t)c->vocab * sizeof(float)));
  }
  ST_CHECK(stream_sync(&m->stream));
  kv->length += n;
  return ST_OK;
}
