/* token_data.c - the token shard reader and batch loader (see token_data.h).
 *
 * Ownership: the loader owns the shard table, one string pool with the shard paths, the window
 * of B*T+1 tokens a micro-batch is read into (all MEM_WORKSPACE), and a descriptor on the shard it
 * is reading. Shards are only read, never mapped: a rank touches B*T+1 tokens per step.
 */
#include "engine/io/token_data.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
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
  uint64_t local_tokens;  /* B*T: one rank's slice of a micro-batch */
  uint64_t global_tokens; /* micro_batches*dp_size*B*T */
  size_t shard_count;
  token_shard *shards; /* sorted by path */
  char *paths;
  uint16_t *window; /* local_tokens + 1 */
  token_position position;
  int micro; /* the next micro-batch of the global batch at `position` */
  int fd;    /* descriptor of shards[fd_shard], or -1 */
  uint64_t fd_shard;
};

static st_status check_config(const token_loader_config *c, uint64_t *local, uint64_t *global) {
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
  uint64_t micro = 0;
  if (__builtin_mul_overflow(*local, (uint64_t)c->dp_size, &micro) ||
      __builtin_mul_overflow(micro, (uint64_t)c->micro_batches, global) ||
      *global > UINT64_MAX / 4) {
    return st_error(ST_ERR_INVALID_ARG,
                    "token loader: a global batch of %d x %d x %d x %d tokens is too large",
                    c->micro_batches, c->dp_size, c->batch_size, c->seq_len);
  }
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

/* Whether a shard holds one global batch (plus the last target) from `offset`. */
static int holds_batch(const token_loader *loader, const token_shard *shard, uint64_t offset) {
  return offset + loader->global_tokens + 1 <= shard->tokens;
}

/* A shard too short for one global batch is skipped with a warning (the last shard of a
 * dataset often is); data in which no shard holds one is refused, naming the largest shard, in
 * the error alone: a warning per shard before it would only say the same again. */
static st_status check_some_shard_holds_a_batch(const token_loader *loader) {
  const token_shard *largest = &loader->shards[0];
  for (size_t i = 0; i < loader->shard_count; i++) {
    if (loader->shards[i].tokens > largest->tokens) largest = &loader->shards[i];
  }
  if (!holds_batch(loader, largest, 0)) {
    return st_error(ST_ERR_FORMAT,
                    "no shard holds the %llu tokens one global batch reads "
                    "(grad-accum x dp size x B x T + 1): the largest, %s, has %llu",
                    (unsigned long long)(loader->global_tokens + 1), largest->path,
                    (unsigned long long)largest->tokens);
  }
  for (size_t i = 0; i < loader->shard_count; i++) {
    const token_shard *shard = &loader->shards[i];
    if (!holds_batch(loader, shard, 0) && loader->report) {
      st_log(ST_LOG_WARN, "%s: %llu tokens, fewer than one global batch reads: skipped",
             shard->path, (unsigned long long)shard->tokens);
    }
  }
  return ST_OK;
}

st_status token_loader_open(token_loader **out, const token_loader_config *config) {
  *out = NULL;
  uint64_t local = 0, global = 0;
  ST_CHECK(check_config(config, &local, &global));
  token_loader *loader = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&loader, sizeof *loader, MEM_HOST, MEM_WORKSPACE, NULL));
  loader->dp_rank = config->dp_rank;
  loader->dp_size = config->dp_size;
  loader->vocab_size = config->vocab_size;
  loader->micro_batches = config->micro_batches;
  loader->report = config->report;
  loader->local_tokens = local;
  loader->global_tokens = global;
  loader->fd = -1;
  st_status status;
  ST_CHECK_GOTO(find_shards(loader, config->pattern), status, fail);
  for (size_t i = 0; i < loader->shard_count; i++) {
    ST_CHECK_GOTO(read_shard_header(&loader->shards[i]), status, fail);
  }
  ST_CHECK_GOTO(check_some_shard_holds_a_batch(loader), status, fail);
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

/* The global batch's shard is chosen at its first micro-batch, for all of them: whether it
 * fits depends on the whole global batch, not on the micro-batch, so that every mesh with the
 * same global batch reads the same tokens. */
st_status token_loader_next(token_loader *loader, int32_t *inputs, int32_t *targets) {
  token_position at = loader->position;
  while (loader->micro == 0 && !holds_batch(loader, &loader->shards[at.shard], at.offset)) {
    /* On to the next shard that holds a global batch (open made sure one does). */
    at.shard = (at.shard + 1) % loader->shard_count;
    at.offset = 0;
  }
  const token_shard *shard = &loader->shards[at.shard];
  const uint64_t slice = (uint64_t)loader->micro * loader->dp_size + loader->dp_rank;
  uint64_t first = at.offset + slice * loader->local_tokens;
  size_t count = (size_t)loader->local_tokens + 1;
  ST_CHECK(open_shard(loader, at.shard));
  ST_CHECK(file_read_at(loader->fd, shard->path, loader->window, count * sizeof(uint16_t),
                        HEADER_BYTES + first * sizeof(uint16_t)));
  for (size_t i = 0; i < count; i++) {
    if (loader->window[i] >= loader->vocab_size) {
      return st_error(ST_ERR_FORMAT,
                      "%s: token %u at index %llu is not below the vocabulary size %d", shard->path,
                      loader->window[i], (unsigned long long)(first + i), loader->vocab_size);
    }
  }
  for (size_t i = 0; i + 1 < count; i++) {
    inputs[i] = loader->window[i];
    targets[i] = loader->window[i + 1];
  }
  if (++loader->micro == loader->micro_batches) {
    loader->micro = 0;
    at.offset += loader->global_tokens;
  }
  loader->position = at;
  return ST_OK;
}

uint64_t token_loader_batches_per_pass(const token_loader *loader) {
  uint64_t batches = 0;
  for (size_t i = 0; i < loader->shard_count; i++) {
    const uint64_t n = loader->shards[i].tokens;
    if (n > 0) batches += (n - 1) / loader->global_tokens;
  }
  return batches;
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
