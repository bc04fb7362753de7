/* cmd_sample.c - `shardtrain sample`: loads a model, feeds it a prompt and prints what it
 * generates, on one rank (no MPI), through the key/value cache of gpt_kv.
 *
 * Everything named on the command line is checked before generation starts, and a problem with
 * it (a flag, a file, the prompt) is one error line and exit code 2; a failure while generating
 * is exit code 1. The text goes to stdout as it is generated; the summary and the notice of an
 * early stop go to stderr, so stdout holds only the text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/cli/commands.h"
#include "engine/flags/cli_flags.h"
#include "engine/io/tokenizer.h"
#include "engine/model/gpt_generate.h"
#include "engine/model/gpt_io.h"

/* A byte-level vocabulary: a text prompt is its bytes, and a token prints as its byte. */
#define BYTE_VOCAB 256

typedef struct sample_options {
  const char *from, *prompt, *prompt_ids, *tokenizer;
  int tokens, top_k, seed, n_head;
  double temperature;
} sample_options;

typedef struct sample_run {
  const sample_options *o;
  st_device device;
  gpt_model *model;
  tokenizer *tok;
  int32_t *prompt, *generated;
  int n_prompt;
  gpt_kv *kv;
  sampler *sampler;
} sample_run;

static int sample_flags(sample_options *o, cli_flag *f, int capacity) {
  const cli_flag table[] = {
      {"from", FLAG_STRING, &o->from,
       "the model: a checkpoint step directory (ckpt/step_N) or a Hugging Face GPT-2 "
       "safetensors file (train --export writes one)"},
      {"prompt", FLAG_STRING, &o->prompt, "text to continue, as bytes (byte vocabularies only)"},
      {"prompt-ids", FLAG_STRING, &o->prompt_ids, "the prompt as token ids: 15496,11,995"},
      {"tokens", FLAG_INT, &o->tokens, "tokens to generate"},
      {"temperature", FLAG_DOUBLE, &o->temperature, "softmax temperature (0: the likeliest token)"},
      {"top-k", FLAG_INT, &o->top_k, "sample among the k likeliest tokens (0: all)"},
      {"seed", FLAG_INT, &o->seed, "seed of the draws: equal seeds, equal text"},
      {"tokenizer", FLAG_STRING, &o->tokenizer,
       "llm.c gpt2_tokenizer.bin: print text, not ids, for a GPT-2 vocabulary"},
      {"n-head", FLAG_INT, &o->n_head,
       "attention heads (0: the checkpoint's or the file's metadata, else the named config of its "
       "shape); must agree with what the model records"},
  };
  int n = (int)(sizeof table / sizeof table[0]);
  if (n > capacity) n = capacity;
  memcpy(f, table, (size_t)n * sizeof *f);
  return n;
}

/* What can be checked before any file is read. */
static st_status check_options(const sample_options *o) {
  if (!o->from) return st_error(ST_ERR_INVALID_ARG, "--from is required: the model to sample");
  if (o->prompt && o->prompt_ids) {
    return st_error(ST_ERR_INVALID_ARG, "--prompt and --prompt-ids: give one of them");
  }
  if (!o->prompt && !o->prompt_ids) {
    return st_error(ST_ERR_INVALID_ARG,
                    "a prompt is required: --prompt TEXT or --prompt-ids 15496,11,995");
  }
  if (o->prompt && !*o->prompt) return st_error(ST_ERR_INVALID_ARG, "--prompt is empty");
  if (o->prompt_ids && !*o->prompt_ids) {
    return st_error(ST_ERR_INVALID_ARG, "--prompt-ids is empty");
  }
  if (o->tokens < 1) {
    return st_error(ST_ERR_INVALID_ARG, "--tokens must be >= 1, got %d", o->tokens);
  }
  if (o->temperature < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--temperature must be >= 0, got %g", o->temperature);
  }
  if (o->top_k < 0) return st_error(ST_ERR_INVALID_ARG, "--top-k must be >= 0, got %d", o->top_k);
  if (o->n_head < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--n-head must be >= 0, got %d", o->n_head);
  }
  return ST_OK;
}

/* A checkpoint step directory of any mesh, restored into a one-rank model. */
static st_status load_checkpoint(const char *path, int n_head, const st_device *dev,
                                 gpt_model **out) {
  ckpt_source *src = NULL;
  st_status status = ckpt_source_open(&src, path);
  gpt_config cfg;
  if (status == ST_OK) {
    cfg = ckpt_source_manifest(src)->cfg;
    status = gpt_config_finish(&cfg, 1);
  }
  if (status == ST_OK && n_head > 0 && n_head != cfg.n_head) {
    status = st_error(ST_ERR_INVALID_ARG, "%s/manifest.json records n_head %d and --n-head is %d",
                      ckpt_source_dir(src), cfg.n_head, n_head);
  }
  if (status == ST_OK) status = gpt_create(out, &cfg, dev, 1, 1, NULL);
  if (status == ST_OK) status = ckpt_restore(*out, src);
  ckpt_source_close(src);
  if (status != ST_OK) {
    gpt_destroy(*out);
    *out = NULL;
    return st_error(status, "--from %s", st_last_error());
  }
  return ST_OK;
}

/* The one place the model comes from: a checkpoint step directory (any mesh, stage and dtype),
 * or a Hugging Face GPT-2 safetensors file as `train --export` writes, whose config comes from
 * the tensors' shapes and the metadata (n_head: --n-head when > 0). The model is built for one
 * rank with a 1 x 1 micro-batch: generation runs through gpt_kv and needs none of the training
 * activations. */
static st_status load_model(const char *path, int n_head, const st_device *dev, gpt_model **out) {
  *out = NULL;
  struct stat info;
  if (stat(path, &info) != 0) {
    return st_error(ST_ERR_IO, "--from %s: cannot read: %s", path, strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) return load_checkpoint(path, n_head, dev, out);
  gpt_config cfg;
  st_status status = gpt_config_from_file(path, n_head, &cfg);
  if (status != ST_OK) return st_error(status, "--from %s", st_last_error());
  ST_CHECK(gpt_create(out, &cfg, dev, 1, 1, NULL));
  status = gpt_import(*out, path, "");
  if (status != ST_OK) {
    gpt_destroy(*out);
    *out = NULL;
    return st_error(status, "--from %s", st_last_error());
  }
  return ST_OK;
}

/* --prompt-ids "1,2,3" into r->prompt, each id checked against the vocabulary. */
static st_status parse_ids(sample_run *r, const char *text, int vocab) {
  int count = 1;
  for (const char *p = text; *p; p++) count += *p == ',';
  ST_CHECK(mem_alloc((void **)&r->prompt, (size_t)count * sizeof *r->prompt, MEM_HOST,
                     MEM_WORKSPACE, NULL));
  const char *p = text;
  for (int i = 0; i < count; i++) {
    char *end = NULL;
    errno = 0;
    long id = strtol(p, &end, 10);
    const int no_digits = end == p; /* before the spaces after it: " " alone is no id */
    while (*end == ' ') end++;
    if (no_digits || (*end != ',' && *end) || errno || id < 0) {
      return st_error(ST_ERR_INVALID_ARG, "--prompt-ids '%s': item %d is not a token id", text,
                      i + 1);
    }
    if (id >= vocab) {
      return st_error(ST_ERR_INVALID_ARG,
                      "--prompt-ids: token %ld (item %d) is outside the model's vocabulary [0, %d)",
                      id, i + 1, vocab);
    }
    r->prompt[i] = (int32_t)id;
    p = end + (*end == ',');
  }
  r->n_prompt = count;
  return ST_OK;
}

static st_status encode_prompt(sample_run *r) {
  const gpt_config *c = &r->model->cfg;
  if (r->o->prompt_ids) {
    ST_CHECK(parse_ids(r, r->o->prompt_ids, c->vocab));
  } else {
    if (c->vocab != BYTE_VOCAB) {
      return st_error(ST_ERR_INVALID_ARG,
                      "--prompt: a text prompt is encoded as its bytes, which needs a byte "
                      "vocabulary (%d tokens), and this model has %d: give token ids with "
                      "--prompt-ids (GPT-2 BPE encoding of text is not implemented)",
                      BYTE_VOCAB, c->vocab);
    }
    r->n_prompt = (int)strlen(r->o->prompt);
    ST_CHECK(mem_alloc((void **)&r->prompt, (size_t)r->n_prompt * sizeof *r->prompt, MEM_HOST,
                       MEM_WORKSPACE, NULL));
    for (int i = 0; i < r->n_prompt; i++) r->prompt[i] = (unsigned char)r->o->prompt[i];
  }
  if (r->n_prompt > c->max_seq) {
    return st_error(ST_ERR_INVALID_ARG, "%s has %d tokens, the model has only %d positions",
                    r->o->prompt_ids ? "--prompt-ids" : "--prompt", r->n_prompt, c->max_seq);
  }
  return ST_OK;
}

static st_status load_tokenizer(sample_run *r) {
  if (!r->o->tokenizer) return ST_OK;
  st_status status = tokenizer_load(&r->tok, r->o->tokenizer);
  if (status != ST_OK) return st_error(status, "--tokenizer %s", st_last_error());
  if (tokenizer_vocab(r->tok) != r->model->cfg.vocab) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--tokenizer %s has %d tokens, the model's vocabulary %d: they do not belong "
                    "together",
                    r->o->tokenizer, tokenizer_vocab(r->tok), r->model->cfg.vocab);
  }
  return ST_OK;
}

/* Everything the command line names, checked; then the cache and the sampler. */
static st_status setup(sample_run *r) {
  const sample_options *o = r->o;
  r->device = device_cpu();
  ST_CHECK(load_model(o->from, o->n_head, &r->device, &r->model));
  ST_CHECK(load_tokenizer(r));
  ST_CHECK(encode_prompt(r));
  /* No more than the model's positions can be generated, whatever --tokens asks. */
  const int most = o->tokens < r->model->cfg.max_seq ? o->tokens : r->model->cfg.max_seq;
  ST_CHECK(mem_alloc((void **)&r->generated, (size_t)most * sizeof *r->generated, MEM_HOST,
                     MEM_WORKSPACE, NULL));
  ST_CHECK(gpt_kv_create(&r->kv, r->model, r->n_prompt, 1));
  const sampler_config sc = {o->temperature, o->top_k, (uint64_t)(int64_t)o->seed};
  return sampler_create(&r->sampler, r->model->cfg.vocab, &sc);
}

static void teardown(sample_run *r) {
  sampler_destroy(r->sampler);
  gpt_kv_destroy(r->kv);
  mem_free(r->generated);
  mem_free(r->prompt);
  tokenizer_free(r->tok);
  gpt_destroy(r->model);
}

/* Prints tokens as the vocabulary allows: bytes, the tokenizer's text, or ids. */
typedef struct printer {
  const tokenizer *tok;
  int as_bytes;
  int count; /* tokens printed so far */
} printer;

static st_status print_token(void *ctx, int32_t token) {
  printer *p = ctx;
  if (p->tok) {
    size_t len;
    const unsigned char *bytes = tokenizer_bytes(p->tok, token, &len);
    fwrite(bytes, 1, len, stdout);
  } else if (p->as_bytes) {
    fputc(token, stdout);
  } else {
    fprintf(stdout, p->count ? " %d" : "%d", (int)token);
  }
  p->count++;
  if (fflush(stdout) != 0 || ferror(stdout)) {
    return st_error(ST_ERR_IO, "writing the text to stdout failed: %s", strerror(errno));
  }
  return ST_OK;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static st_status generate(sample_run *r) {
  const gpt_config *c = &r->model->cfg;
  printer p = {.tok = r->tok, .as_bytes = c->vocab == BYTE_VOCAB};
  for (int i = 0; i < r->n_prompt; i++) ST_CHECK(print_token(&p, r->prompt[i]));
  gpt_generation g;
  double start = now_ms();
  ST_CHECK(gpt_generate(r->kv, r->sampler, r->prompt, r->n_prompt, r->o->tokens, r->generated,
                        print_token, &p, &g));
  double ms = now_ms() - start;
  fputc('\n', stdout);
  fflush(stdout);
  if (g.full) {
    fprintf(stderr,
            "shardtrain sample: stopped after %d of %d tokens: the sequence fills the model's %d "
            "positions\n",
            g.generated, r->o->tokens, c->max_seq);
  }
  fprintf(stderr, "shardtrain sample: %d token%s after a prompt of %d in %.1f ms (%.1f tokens/s)\n",
          g.generated, g.generated == 1 ? "" : "s", r->n_prompt, ms,
          ms > 0 ? 1e3 * g.generated / ms : 0.0);
  return ST_OK;
}

int cmd_sample(int argc, char **argv) {
  sample_options o = {.tokens = 64, .temperature = 1.0, .top_k = 0, .seed = 1337};
  cli_flag flags[16];
  int nflags = sample_flags(&o, flags, 16), help = 0;
  st_status status = cli_parse(argc, argv, 2, flags, nflags, &help);
  if (help) {
    cli_print_help(stdout, "shardtrain sample --from CKPT|FILE --prompt TEXT [flags]",
                   "Continues a prompt with a trained GPT-2 model on one rank, with a key/value\n"
                   "cache (the prompt is run once, then one token at a time).",
                   flags, nflags);
    return 0;
  }
  if (status == ST_OK) status = check_options(&o);
  sample_run r = {.o = &o};
  if (status == ST_OK) status = setup(&r);
  int code = 0;
  if (status != ST_OK) {
    code = status == ST_ERR_OOM ? 1 : 2;
  } else {
    status = generate(&r);
    code = status == ST_OK ? 0 : 1;
  }
  if (status != ST_OK) fprintf(stderr, "shardtrain sample: error: %s\n", st_last_error());
  teardown(&r);
  return code;
}
