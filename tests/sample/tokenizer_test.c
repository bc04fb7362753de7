/* tokenizer_test.c - llm.c's tokenizer file: version 2 and version 1 files load and give back
 * every token's bytes (a zero byte and a 255-byte token included); every kind of damage is
 * refused with ST_ERR_FORMAT (or ST_ERR_IO for a missing file) and a detail naming the file and
 * the fault; every allocation of a load fails in turn with nothing leaked. The files are built
 * here byte by byte, independently of the reader. */
#include "engine/io/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "tests/engine/test_files.h"
#include "tests/testing.h"

enum { MAX_FILE = 8192 };

typedef struct file_image {
  unsigned char bytes[MAX_FILE];
  size_t size;
} file_image;

/* A header (magic, version, count, eot) and then the tokens, each a length byte and its bytes. */
static void build(file_image *f, uint32_t magic, uint32_t version, uint32_t count, uint32_t eot,
                  const char *const *tokens, const size_t *lens, int n) {
  uint32_t header[TOKENIZER_HEADER_INTS] = {magic, version, count, eot};
  memcpy(f->bytes, header, sizeof header);
  f->size = sizeof header;
  for (int i = 0; i < n; i++) {
    f->bytes[f->size++] = (unsigned char)lens[i];
    memcpy(f->bytes + f->size, tokens[i], lens[i]);
    f->size += lens[i];
  }
}

static char long_token[255];
static const char *const tokens[] = {"a", "bc", "<|endoftext|>", "\xff\x00z", long_token};
static const size_t lens[] = {1, 2, 13, 3, 255};
enum { N = 5 };

static void check_loads(void) {
  memset(long_token, 'x', sizeof long_token);
  file_image f;
  char path[512];
  test_tmp_path(path, sizeof path, "v2.bin");
  build(&f, TOKENIZER_MAGIC, 2, N, 2, tokens, lens, N);
  test_write_file(path, f.bytes, f.size);
  tokenizer *t = NULL;
  CHECK_OK(tokenizer_load(&t, path));
  if (!t) return;
  CHECK_EQ_INT(tokenizer_vocab(t), N);
  CHECK_EQ_INT(tokenizer_eot(t), 2);
  for (int i = 0; i < N; i++) {
    size_t len = 0;
    const unsigned char *b = tokenizer_bytes(t, i, &len);
    CHECK_MSG(len == lens[i] && memcmp(b, tokens[i], len) == 0, "token %d's bytes", i);
  }
  tokenizer_free(t);

  test_tmp_path(path, sizeof path, "v1.bin");
  build(&f, TOKENIZER_MAGIC, 1, 2, 12345, tokens, lens, 2); /* [3] means nothing in version 1 */
  test_write_file(path, f.bytes, f.size);
  CHECK_OK(tokenizer_load(&t, path));
  if (t) CHECK_EQ_INT(tokenizer_eot(t), -1);
  tokenizer_free(t);
}

/* Writes the image, loads it, and expects `status` with a detail holding `needle` and the path. */
static void expect_refused(const char *name, const file_image *f, st_status status,
                           const char *needle) {
  char path[512];
  test_tmp_path(path, sizeof path, name);
  test_write_file(path, f->bytes, f->size);
  tokenizer *t = NULL;
  CHECK_STATUS(tokenizer_load(&t, path), status);
  CHECK(t == NULL);
  CHECK_MSG(strstr(st_last_error(), needle) && strstr(st_last_error(), path),
            "%s: detail '%s' names the file and '%s'", name, st_last_error(), needle);
}

static void check_refusals(void) {
  file_image f;
  build(&f, TOKENIZER_MAGIC, 2, N, 2, tokens, lens, N);
  const size_t good = f.size;
  f.size = 100;
  expect_refused("short.bin", &f, ST_ERR_FORMAT, "shorter than a tokenizer header");
  build(&f, 20240520, 2, N, 2, tokens, lens, N); /* a token shard's magic */
  expect_refused("magic.bin", &f, ST_ERR_FORMAT, "magic number 20240520");
  build(&f, TOKENIZER_MAGIC, 3, N, 2, tokens, lens, N);
  expect_refused("version.bin", &f, ST_ERR_FORMAT, "version 3");
  build(&f, TOKENIZER_MAGIC, 2, 0, 0, tokens, lens, 0);
  expect_refused("empty.bin", &f, ST_ERR_FORMAT, "0 tokens");
  build(&f, TOKENIZER_MAGIC, 2, N, N, tokens, lens, N);
  expect_refused("eot.bin", &f, ST_ERR_FORMAT, "end-of-text token 5");
  build(&f, TOKENIZER_MAGIC, 2, N + 1, 2, tokens, lens, N);
  expect_refused("fewer.bin", &f, ST_ERR_FORMAT, "ends after token 5 of 6");
  /* A count far beyond the bytes: refused before its offset table is allocated (1 << 24 tokens
   * took 128 MiB for a file of a few hundred bytes). */
  build(&f, TOKENIZER_MAGIC, 2, 1 << 24, 2, tokens, lens, N);
  expect_refused("huge.bin", &f, ST_ERR_FORMAT, "fewer than 16777216 tokens can hold");
  build(&f, TOKENIZER_MAGIC, 2, N, 2, tokens, lens, N);
  f.size = good - 10;
  expect_refused("cut.bin", &f, ST_ERR_FORMAT, "token 4's 255 bytes run past the end");
  build(&f, TOKENIZER_MAGIC, 2, N, 2, tokens, lens, N);
  f.bytes[f.size++] = 7;
  expect_refused("trailing.bin", &f, ST_ERR_FORMAT, "1 bytes follow the last of its 5 tokens");
  build(&f, TOKENIZER_MAGIC, 2, N, 2, tokens, lens, N);
  f.bytes[TOKENIZER_HEADER_INTS * 4 + 2] = 0; /* token 1's length */
  expect_refused("zero.bin", &f, ST_ERR_FORMAT, "token 1 has length 0");
  char path[512];
  test_tmp_path(path, sizeof path, "missing.bin");
  tokenizer *t = NULL;
  CHECK_STATUS(tokenizer_load(&t, path), ST_ERR_IO);
}

static st_status load_and_free(const void *path) {
  tokenizer *t = NULL;
  st_status status = tokenizer_load(&t, path);
  tokenizer_free(t);
  return status;
}

int main(void) {
  check_loads();
  check_refusals();
  char path[512];
  test_tmp_path(path, sizeof path, "v2.bin");
  CHECK(test_fail_each_allocation("tokenizer_load", load_and_free, path) >= 3);
  return test_finish("tokenizer_test");
}
