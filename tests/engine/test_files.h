/* test_files.h - scratch files for the engine's file tests.
 *
 * Paths live under $TEST_TMPDIR (Bazel's per-test scratch directory). Files are read and written
 * with plain stdio, independently of the engine code under test. test_live_blocks() is the
 * allocator's live block count: a call that fails must leave it where it was.
 */
#ifndef ST_TESTS_ENGINE_TEST_FILES_H
#define ST_TESTS_ENGINE_TEST_FILES_H

#include <stddef.h>
#include <stdint.h>

/* "$TEST_TMPDIR/<name>" (or /tmp/<name> outside Bazel) into `out`. */
void test_tmp_path(char *out, size_t size, const char *name);

/* Creates the directory "$TEST_TMPDIR/<name>" (if missing) and puts its path into `out`. */
void test_make_dir(char *out, size_t size, const char *name);

/* Writes the whole file; records a failed check if it cannot. */
void test_write_file(const char *path, const void *bytes, size_t size);

/* The whole file in a malloc'd buffer (free() it), or NULL if it cannot be read. */
unsigned char *test_read_file(const char *path, size_t *size);

int test_file_exists(const char *path);

/* Writes an llm.c token shard with the given header fields (right or wrong: tests need both)
 * followed by `token_count` tokens. */
void test_write_token_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                            const uint16_t *tokens, size_t token_count);

uint64_t test_live_blocks(void);

#endif /* ST_TESTS_ENGINE_TEST_FILES_H */
