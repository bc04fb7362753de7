/* token_data.h - llm.c's token shards and the data-parallel batch loader over them.
 *
 * A shard is a header of 256 little-endian int32 ([0] = 20240520, [1] = 1, [2] = the token
 * count n) followed by n little-endian uint16 tokens, so llm.c's data preparation scripts work
 * unchanged. The loader reads the shards matching a glob pattern, sorted by name, as one stream
 * of sequences: the windows of T + 1 tokens at offsets 0, T, 2T, ... of each shard while they
 * fit (a sequence's T inputs, each target the next token; consecutive sequences share a token),
 * shard after shard, starting over after the last; a shard shorter than one sequence is skipped
 * (with a warning at open). A global batch, one optimizer step's, is the next micro_batches *
 * dp_size * B sequences of the stream; micro-batch k of data-parallel rank d holds its
 * sequences (k * dp_size + d) * B on, so every split of a global batch into micro-batches and
 * ranks reads the same sequences, also where it spans the end of a shard. Within a shard these
 * are llm.c's windows. Every rank derives the same positions from the same files, so the ranks
 * stay in step without communicating.
 */
#ifndef ST_ENGINE_IO_TOKEN_DATA_H
#define ST_ENGINE_IO_TOKEN_DATA_H

#include <stdint.h>

#include "shardtrain.h"

#define TOKEN_SHARD_MAGIC 20240520
#define TOKEN_SHARD_VERSION 1
#define TOKEN_SHARD_HEADER_INTS 256

typedef struct token_loader_config {
  const char *pattern; /* glob(3) pattern of the shard files; borrowed during open only */
  int batch_size;      /* B: sequences per rank and micro-batch */
  int seq_len;         /* T: tokens per sequence */
  int dp_rank;         /* this rank's slice of each global batch, in [0, dp_size) */
  int dp_size;
  int vocab_size;    /* every token read must be below it (at most 65536) */
  int micro_batches; /* per global batch: the gradient accumulation, >= 1 */
  int report;        /* whether this rank warns of the shards skipped (one rank of the job) */
} token_loader_config;

/* Where the next global batch starts: a shard (index in name order) and a token offset in it.
 * It does not depend on B or dp_size, so a run can resume on another mesh. */
typedef struct token_position {
  uint64_t shard;
  uint64_t offset;
} token_position;

typedef struct token_loader token_loader;

/* Finds the shards and validates every header (magic, version, a size that matches the token
 * count) and that a pass over the data holds one global batch, so bad data fails here, not
 * hours into a run. */
st_status token_loader_open(token_loader **out, const token_loader_config *config);
void token_loader_close(token_loader *loader);

/* Reads this rank's slice of the next micro-batch, the global batch's micro_batches of them in
 * turn: for b < B, t < T, inputs[b*T + t] is a token and targets[b*T + t] the one after it;
 * each array holds B*T. A token not below the vocabulary size is ST_ERR_FORMAT naming the file
 * and the token's index in it, and leaves the position where it was. */
st_status token_loader_next(token_loader *loader, int32_t *inputs, int32_t *targets);

/* The whole global batches one pass over the data holds. */
uint64_t token_loader_batches_per_pass(const token_loader *loader);

/* What the loader reads, as one number: a 64-bit FNV-1a hash of each shard's file name (without
 * its directory: a node may hold its own copy elsewhere) and token count, in the loaders' order.
 * Ranks stay in step without communicating only where every rank's pattern matched the same
 * shards; equal fingerprints say they did. */
uint64_t token_loader_fingerprint(const token_loader *loader);

/* How many shards it reads. */
size_t token_loader_shard_count(const token_loader *loader);

/* The position of the next global batch (for a checkpoint, between global batches). */
token_position token_loader_tell(const token_loader *loader);

/* Continues from a position that token_loader_tell returned, at its global batch's first
 * micro-batch; outside the data it is ST_ERR_INVALID_ARG. */
st_status token_loader_seek(token_loader *loader, token_position position);

#endif /* ST_ENGINE_IO_TOKEN_DATA_H */
