/* tokenizer.c - loading llm.c's tokenizer file (tokenizer.h). The token bytes are read in one
 * piece and indexed by an offset table; both blocks (MEM_WORKSPACE) belong to the tokenizer. */
#include "engine/io/tokenizer.h"

#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/io/file_io.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the header is read unconverted");

/* Far above GPT-2's 50257 and any real vocabulary; a larger count is a corrupt header. */
#define TOKENIZER_MAX_VOCAB (1 << 24)

struct tokenizer {
  int vocab, eot;
  unsigned char *bytes; /* every token's bytes, in id order */
  uint64_t *offsets;    /* vocab + 1: token i is bytes[offsets[i], offsets[i + 1]) */
};

/* Checks the header; sets the vocabulary and the end-of-text token. */
static st_status read_header(tokenizer *t, int fd, const char *path, uint64_t size) {
  uint32_t header[TOKENIZER_HEADER_INTS];
  if (size < sizeof header) {
    return st_error(ST_ERR_FORMAT,
                    "%s: %llu bytes, shorter than a tokenizer header (%zu bytes): not an llm.c "
                    "tokenizer file",
                    path, (unsigned long long)size, sizeof header);
  }
  ST_CHECK(file_read_at(fd, path, header, sizeof header, 0));
  if (header[0] != TOKENIZER_MAGIC) {
    return st_error(ST_ERR_FORMAT, "%s: magic number %u, expected %u: not an llm.c tokenizer file",
                    path, header[0], TOKENIZER_MAGIC);
  }
  if (header[1] != 1 && header[1] != 2) {
    return st_error(ST_ERR_FORMAT, "%s: tokenizer version %u, expected 1 or 2", path, header[1]);
  }
  if (header[2] < 1 || header[2] > TOKENIZER_MAX_VOCAB) {
    return st_error(ST_ERR_FORMAT, "%s: %u tokens, expected 1 to %d", path, header[2],
                    TOKENIZER_MAX_VOCAB);
  }
  t->vocab = (int)header[2];
  t->eot = -1;
  if (header[1] == 2) {
    if (header[3] >= header[2]) {
      return st_error(ST_ERR_FORMAT, "%s: end-of-text token %u is not among its %u tokens", path,
                      header[3], header[2]);
    }
    t->eot = (int)header[3];
  }
  return ST_OK;
}

/* Walks the length-prefixed records in `body` (the file after the header), filling the offset
 * table and packing the token bytes to the front of `body`, which becomes t->bytes. */
static st_status index_tokens(tokenizer *t, const char *path, uint64_t body_size) {
  uint64_t at = 0, packed = 0;
  for (int i = 0; i < t->vocab; i++) {
    if (at >= body_size) {
      return st_error(ST_ERR_FORMAT, "%s: ends after token %d of %d", path, i, t->vocab);
    }
    unsigned len = t->bytes[at];
    if (len == 0) return st_error(ST_ERR_FORMAT, "%s: token %d has length 0", path, i);
    if (len > body_size - at - 1) {
      return st_error(ST_ERR_FORMAT, "%s: token %d's %u bytes run past the end of the file", path,
                      i, len);
    }
    memmove(t->bytes + packed, t->bytes + at + 1, len);
    t->offsets[i] = packed;
    packed += len;
    at += 1 + len;
  }
  t->offsets[t->vocab] = packed;
  if (at != body_size) {
    return st_error(ST_ERR_FORMAT, "%s: %llu bytes follow the last of its %d tokens", path,
                    (unsigned long long)(body_size - at), t->vocab);
  }
  return ST_OK;
}

st_status tokenizer_load(tokenizer **out, const char *path) {
  *out = NULL;
  int fd = -1;
  uint64_t size = 0;
  ST_CHECK(file_open_read(path, &fd, &size));
  tokenizer *t = NULL;
  st_status status;
  ST_CHECK_GOTO(mem_alloc_zeroed((void **)&t, sizeof *t, MEM_HOST, MEM_WORKSPACE, NULL), status,
                done);
  ST_CHECK_GOTO(read_header(t, fd, path, size), status, done);
  const uint64_t header_bytes = TOKENIZER_HEADER_INTS * sizeof(uint32_t),
                 body = size - header_bytes;
  /* Each token takes 2 to 256 bytes (its length, then its bytes): a body outside that range
   * is not this format, and the offset table, sized by the declared count, stays within a
   * multiple of the file's size. */
  const int too_few = body < (uint64_t)t->vocab * 2;
  if (too_few || body > (uint64_t)t->vocab * 256) {
    status = st_error(ST_ERR_FORMAT, "%s: %llu bytes of tokens, %s %d tokens can hold", path,
                      (unsigned long long)body, too_few ? "fewer than" : "more than", t->vocab);
    goto done;
  }
  ST_CHECK_GOTO(mem_alloc((void **)&t->bytes, body ? body : 1, MEM_HOST, MEM_WORKSPACE, NULL),
                status, done);
  ST_CHECK_GOTO(mem_alloc((void **)&t->offsets, ((size_t)t->vocab + 1) * sizeof *t->offsets,
                          MEM_HOST, MEM_WORKSPACE, NULL),
                status, done);
  ST_CHECK_GOTO(file_read_at(fd, path, t->bytes, body, header_bytes), status, done);
  ST_CHECK_GOTO(index_tokens(t, path, body), status, done);
done:
  close(fd);
  if (status != ST_OK) {
    tokenizer_free(t);
    return status;
  }
  *out = t;
  return ST_OK;
}

void tokenizer_free(tokenizer *t) {
  if (!t) return;
  mem_free(t->offsets);
  mem_free(t->bytes);
  mem_free(t);
}

int tokenizer_vocab(const tokenizer *t) { return t->vocab; }

int tokenizer_eot(const tokenizer *t) { return t->eot; }

const unsigned char *tokenizer_bytes(const tokenizer *t, int id, size_t *len) {
  *len = (size_t)(t->offsets[id + 1] - t->offsets[id]);
  return t->bytes + t->offsets[id];
}
