/* token_data.c - the token shard reader and batch loader (see token_data.h).
 *
 * Ownership: the loader owns the shard table, one string pool with the shard paths, the window
 * of B*T+1 tokens a micro-batch's sequences are read into (all MEM_WORKSPACE), and a descriptor
 * on the shard it is reading. Shards are only read, never mapped: a rank touches its
 * micro-batch's tokens, in one read per shard they lie in.
 */
#include "engine/io/token_data.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/fnv.h"
#include "core/log.h"
#include "engine/io/file_io.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shards are read unconverted");

#define HEADER_BYTES (TOKEN_SHARD_HEADER_INTS * sizeof(int32_t))

typedef struct token_shard {
  const char *path;
  uint64_t tokens;
} token_shard;

struct token_loader {
  int dp_rank, dp_size, vocab_size, micro_batches, report;
  int batch_size;            /* B: sequences per rank and micro-batch */
  uint64_t seq_len;          /* T */
  uint64_t global_sequences; /* micro_batches * dp_size * B: one global batch */
  size_t shard_count;
  token_shard *shards; /* sorted by path */
  char *paths;
  uint16_t *window; /* B * T + 1 tokens: a rank's micro-batch read at once */
  token_position position;
  int micro; /* the next micro-batch of the global batch at `position` */
  int fd;    /* descriptor of shards[fd_shard], or -1 */
  uint64_t fd_shard;
};

static st_status check_config(const token_loader_config *c, uint64_t *local, uint64_t *sequences) {
  if (c->batch_size < 1 || c->seq_len < 1) {
    return st_error(ST_ERR_INVALID_ARG,
                    "token loader: batch size %d and sequence length %d must be positive",
                    c->batch_size, c->seq_len);
  }
  if (c->dp_size < 1 || c->dp_rank < 0 || c->dp_rank >= c->dp_size) {
    return st_error(ST_ERR_INVALID_ARG, "token loader: dp rank %d is not in [0, dp size %d)",
                    c->dp_rank, c->dp_size);
  }
  if (c->micro_batches < 1) {
    return st_error(ST_ERR_INVALID_ARG, "token loader: %d micro-batches per global batch",
                    c->micro_batches);
  }
  if (c->vocab_size < 1 || c->vocab_size > 65536) {
    return st_error(ST_ERR_INVALID_ARG,
                    "token loader: vocabulary size %d is not in [1, 65536], "
                    "what uint16 tokens can index",
                    c->vocab_size);
  }
  *local = (uint64_t)c->batch_size * (uint64_t)c->seq_len;
  /* The margin keeps every later sum of offsets, counts and byte sizes far from overflowing. */
  uint64_t micro = 0, global = 0;
  if (__builtin_mul_overflow(*local, (uint64_t)c->dp_size, &micro) ||
      __builtin_mul_overflow(micro, (uint64_t)c->micro_batches, &global) ||
      global > UINT64_MAX / 4) {
    return st_error(ST_ERR_INVALID_ARG,
                    "token loader: a global batch of %d x %d x %d x %d tokens is too large",
                    c->micro_batches, c->dp_size, c->batch_size, c->seq_len);
  }
  *sequences = global / (uint64_t)c->seq_len;
  return ST_OK;
}

static int compare_paths(const void *a, const void *b) {
  return strcmp(((const token_shard *)a)->path, ((const token_shard *)b)->path);
}

/* Copies the matched paths into the loader, sorted by strcmp: glob's own order follows the
 * locale, and every rank must see the shards in the same order. */
static st_status copy_paths(token_loader *loader, const glob_t *found) {
  size_t pool_bytes = 0;
  for (size_t i = 0; i < found->gl_pathc; i++) pool_bytes += strlen(found->gl_pathv[i]) + 1;
  ST_CHECK(mem_alloc((void **)&loader->paths, pool_bytes, MEM_HOST, MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc_zeroed((void **)&loader->shards, found->gl_pathc * sizeof(token_shard),
                            MEM_HOST, MEM_WORKSPACE, NULL));
  char *next = loader->paths;
  for (size_t i = 0; i < found->gl_pathc; i++) {
    size_t bytes = strlen(found->gl_pathv[i]) + 1;
    memcpy(next, found->gl_pathv[i], bytes);
    loader->shards[i].path = next;
    next += bytes;
  }
  loader->shard_count = found->gl_pathc;
  qsort(loader->shards, loader->shard_count, sizeof(token_shard), compare_paths);
  return ST_OK;
}

static st_status find_shards(token_loader *loader, const char *pattern) {
  glob_t found;
  int rc = glob(pattern, GLOB_NOSORT, NULL, &found);
  st_status status;
  if (rc == GLOB_NOMATCH) {
    status = st_error(ST_ERR_IO, "token data: no file matches '%s'", pattern);
  } else if (rc == GLOB_NOSPACE) {
    status = st_error(ST_ERR_OOM, "token data: out of memory expanding '%s'", pattern);
  } else if (rc != 0) {
    status = st_error(ST_ERR_IO, "token data: cannot read the directories of '%s'", pattern);
  } else {
    status = copy_paths(loader, &found);
  }
  globfree(&found);
  return status;
}

/* Validates one shard's header against its file size and records its token count. */
static st_status read_shard_header(token_shard *shard) {
  int fd;
  uint64_t size;
  ST_CHECK(file_open_read(shard->path, &fd, &size));
  int32_t header[TOKEN_SHARD_HEADER_INTS];
  st_status status = ST_OK;
  if (size < HEADER_BYTES) {
    status = st_error(ST_ERR_FORMAT, "%s: file has %llu bytes, fewer than the %zu-byte header",
                      shard->path, (unsigned long long)size, HEADER_BYTES);
  } else {
    status = file_read_at(fd, shard->path, header, HEADER_BYTES, 0);
  }
  close(fd);
  ST_CHECK(status);
  if (header[0] != TOKEN_SHARD_MAGIC) {
    return st_error(ST_ERR_FORMAT, "%s: magic number %d is not %d: not an llm.c token shard",
                    shard->path, header[0], TOKEN_SHARD_MAGIC);
  }
  if (header[1] != TOKEN_SHARD_VERSION) {
    return st_error(ST_ERR_FORMAT, "%s: version %d is not %d (uint16 tokens)", shard->path,
                    header[1], TOKEN_SHARD_VERSION);
  }
  if (header[2] < 0) {
    return st_error(ST_ERR_FORMAT, "%s: token count %d is negative", shard->path, header[2]);
  }
  uint64_t tokens = (uint64_t)header[2], data_bytes = size - HEADER_BYTES;
  if (data_bytes != tokens * sizeof(uint16_t)) {
    return st_error(ST_ERR_FORMAT,
                    "%s: header says %llu tokens (%llu bytes) but the file holds "
                    "%llu bytes after the header",
                    shard->path, (unsigned long long)tokens,
                    (unsigned long long)(tokens * sizeof(uint16_t)),
                    (unsigned long long)data_bytes);
  }
  shard->tokens = tokens;
  return ST_OK;
}

/* The sequences shard `shard` holds from `offset`: windows of T + 1 tokens starting at offset,
 * offset + T, ... (consecutive ones share a token: one's last target is the next one's first
 * input). */
static uint64_t sequences_at(const token_loader *loader, uint64_t shard, uint64_t offset) {
  const uint64_t n = loader->shards[shard].tokens;
  return offset + loader->seq_len + 1 <= n ? (n - 1 - offset) / loader->seq_len : 0;
}

/* The position `count` sequences after `at`, on a shard that holds a sequence there: the data is
 * one stream of sequences, shard after shard, starting over after the last. */
static token_position advance(const token_loader *loader, token_position at, uint64_t count) {
  for (;;) {
    const uint64_t here = sequences_at(loader, at.shard, at.offset);
    if (count < here) {
      at.offset += count * loader->seq_len;
      return at;
    }
    count -= here;
    at = (token_position){(at.shard + 1) % loader->shard_count, 0};
  }
}

/* The sequences of one pass over the data. */
static uint64_t sequences_per_pass(const token_loader *loader) {
  uint64_t sequences = 0;
  for (size_t i = 0; i < loader->shard_count; i++) sequences += sequences_at(loader, i, 0);
  return sequences;
}

uint64_t token_loader_batches_per_pass(const token_loader *loader) {
  return sequences_per_pass(loader) / loader->global_sequences;
}

uint64_t token_loader_fingerprint(const token_loader *loader) {
  uint64_t hash = FNV_OFFSET_BASIS;
  for (size_t i = 0; i < loader->shard_count; i++) {
    const char *slash = strrchr(loader->shards[i].path, '/');
    const char *name = slash ? slash + 1 : loader->shards[i].path;
    hash = fnv1a(hash, name, strlen(name) + 1);
    hash = fnv1a(hash, &loader->shards[i].tokens, sizeof loader->shards[i].tokens);
  }
  return hash;
}

size_t token_loader_shard_count(const token_loader *loader) { return loader->shard_count; }

/* A shard too short for one sequence is skipped with a warning (the last shard of a dataset
 * may be); data that holds fewer sequences than one global batch is refused, naming its largest
 * shard, in the error alone: a warning per shard before it would only say the same again (and
 * a global batch must not hold a sequence twice). */
static st_status check_data_holds_a_batch(const token_loader *loader, const char *pattern) {
  const token_shard *largest = &loader->shards[0];
  for (size_t i = 0; i < loader->shard_count; i++) {
    if (loader->shards[i].tokens > largest->tokens) largest = &loader->shards[i];
  }
  const uint64_t held = sequences_per_pass(loader);
  if (held < loader->global_sequences) {
    return st_error(ST_ERR_FORMAT,
                    "%s: the data holds %llu sequences of T + 1 = %llu tokens, fewer than the "
                    "%llu of one batch (%d micro-batch%s x dp size %d x B %d); its largest "
                    "shard, %s, has %llu tokens",
                    pattern, (unsigned long long)held, (unsigned long long)loader->seq_len + 1,
                    (unsigned long long)loader->global_sequences, loader->micro_batches,
                    loader->micro_batches == 1 ? "" : "es", loader->dp_size, loader->batch_size,
                    largest->path, (unsigned long long)largest->tokens);
  }
  for (size_t i = 0; i < loader->shard_count; i++) {
    if (sequences_at(loader, i, 0) == 0 && loader->report) {
      st_log(ST_LOG_WARN, "%s: %llu tokens, fewer than one sequence (T + 1 = %llu): skipped",
             loader->shards[i].path, (unsigned long long)loader->shards[i].tokens,
             (unsigned long long)loader->seq_len + 1);
    }
  }
  return ST_OK;
}

st_status token_loader_open(token_loader **out, const token_loader_config *config) {
  *out = NULL;
  uint64_t local = 0, sequences = 0;
  ST_CHECK(check_config(config, &local, &sequences));
  token_loader *loader = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&loader, sizeof *loader, MEM_HOST, MEM_WORKSPACE, NULL));
  loader->dp_rank = config->dp_rank;
  loader->dp_size = config->dp_size;
  loader->vocab_size = config->vocab_size;
  loader->micro_batches = config->micro_batches;
  loader->report = config->report;
  loader->batch_size = config->batch_size;
  loader->seq_len = (uint64_t)config->seq_len;
  loader->global_sequences = sequences;
  loader->fd = -1;
  st_status status;
  ST_CHECK_GOTO(find_shards(loader, config->pattern), status, fail);
  for (size_t i = 0; i < loader->shard_count; i++) {
    ST_CHECK_GOTO(read_shard_header(&loader->shards[i]), status, fail);
  }
  ST_CHECK_GOTO(check_data_holds_a_batch(loader, config->pattern), status, fail);
  ST_CHECK_GOTO(mem_alloc((void **)&loader->window, (local + 1) * sizeof(uint16_t), MEM_HOST,
                          MEM_WORKSPACE, NULL),
                status, fail);
  *out = loader;
  return ST_OK;
fail:
  token_loader_close(loader);
  return status;
}

void token_loader_close(token_loader *loader) {
  if (!loader) return;
  if (loader->fd >= 0) close(loader->fd);
  mem_free(loader->window);
  mem_free(loader->shards);
  mem_free(loader->paths);
  mem_free(loader);
}

/* Keeps one descriptor, on the shard being read: consecutive batches come from the same one. */
static st_status open_shard(token_loader *loader, uint64_t shard) {
  if (loader->fd >= 0 && loader->fd_shard == shard) return ST_OK;
  if (loader->fd >= 0) close(loader->fd);
  uint64_t size;
  loader->fd = -1;
  ST_CHECK(file_open_read(loader->shards[shard].path, &loader->fd, &size));
  loader->fd_shard = shard;
  return ST_OK;
}

/* Reads `count` consecutive sequences of one shard from `at` into rows `row`.. of the arrays. */
static st_status read_sequences(token_loader *loader, token_position at, uint64_t count, int row,
                                int32_t *inputs, int32_t *targets) {
  const token_shard *shard = &loader->shards[at.shard];
  const uint64_t T = loader->seq_len, tokens = count * T + 1;
  ST_CHECK(open_shard(loader, at.shard));
  ST_CHECK(file_read_at(loader->fd, shard->path, loader->window, tokens * sizeof(uint16_t),
                        HEADER_BYTES + at.offset * sizeof(uint16_t)));
  for (uint64_t i = 0; i < tokens; i++) {
    if (loader->window[i] >= loader->vocab_size) {
      return st_error(ST_ERR_FORMAT,
                      "%s: token %u at index %llu is not below the vocabulary size %d", shard->path,
                      loader->window[i], (unsigned long long)(at.offset + i), loader->vocab_size);
    }
  }
  int32_t *in = inputs + (uint64_t)row * T, *tg = targets + (uint64_t)row * T;
  for (uint64_t i = 0; i + 1 < tokens; i++) {
    in[i] = loader->window[i];
    tg[i] = loader->window[i + 1];
  }
  return ST_OK;
}

/* Micro-batch k of dp rank d is the B sequences from (k * dp_size + d) * B on in the global
 * batch's stream, shard ends included, so every split of a global batch into micro-batches and
 * ranks reads the same sequences. */
st_status token_loader_next(token_loader *loader, int32_t *inputs, int32_t *targets) {
  const uint64_t B = (uint64_t)loader->batch_size;
  const uint64_t first = ((uint64_t)loader->micro * loader->dp_size + loader->dp_rank) * B;
  token_position at = advance(loader, loader->position, first);
  for (uint64_t row = 0; row < B;) {
    const uint64_t here = sequences_at(loader, at.shard, at.offset);
    const uint64_t count = B - row < here ? B - row : here;
    ST_CHECK(read_sequences(loader, at, count, (int)row, inputs, targets));
    row += count;
    at = advance(loader, at, count);
  }
  if (++loader->micro == loader->micro_batches) {
    /* Just after the global batch's last sequence, in its shard (the next read moves on from a
     * shard it exhausted): the position llm.c's loader would record. */
    token_position last = advance(loader, loader->position, loader->global_sequences - 1);
    last.offset += loader->seq_len;
    loader->position = last;
    loader->micro = 0;
  }
  return ST_OK;
}

token_position token_loader_tell(const token_loader *loader) { return loader->position; }

st_status token_loader_seek(token_loader *loader, token_position position) {
  if (position.shard >= loader->shard_count ||
      position.offset > loader->shards[position.shard].tokens) {
    return st_error(ST_ERR_INVALID_ARG,
                    "token loader: position (shard %llu, offset %llu) is "
                    "outside the data (%zu shards)",
                    (unsigned long long)position.shard, (unsigned long long)position.offset,
                    loader->shard_count);
  }
  loader->position = position;
  loader->micro = 0;
  return ST_OK;
}
