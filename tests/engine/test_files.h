/* test_files.h - what the engine's file tests share: scratch files and failure checks.
 *
 * Paths live under $TEST_TMPDIR (Bazel's per-test scratch directory). Files are read and written
 * with plain stdio, independently of the engine code under test. test_live_blocks() is the
 * allocator's live block count: a call that fails must leave it where it was.
 */
#ifndef ST_TESTS_ENGINE_TEST_FILES_H
#define ST_TESTS_ENGINE_TEST_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "shardtrain.h"

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

/* Runs call(arg) with its 1st, 2nd, ... allocation failing until it succeeds; every failure
 * must be ST_ERR_OOM with no block left behind. Returns how many allocations the call makes
 * (-1 if it never succeeded). */
int test_fail_each_allocation(const char *what, st_status (*call)(const void *arg),
                              const void *arg);

/* xorshift64: a seeded generator, so every run corrupts files the same way. */
uint64_t test_random(uint64_t *state);

#endif /* ST_TESTS_ENGINE_TEST_FILES_H */
