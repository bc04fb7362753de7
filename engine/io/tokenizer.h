/* tokenizer.h - llm.c's GPT-2 tokenizer file (gpt2_tokenizer.bin), for turning token ids back
 * into text. The file: a header of 256 uint32 (little-endian), [0] = 20240328, [1] = version (1
 * or 2), [2] = the number of tokens, [3] = the end-of-text token (version 2); then for each token
 * in id order a uint8 length (at least 1) followed by that many bytes. The whole file is
 * validated when loaded (the magic, the version, every length, no bytes missing or left over);
 * a fault is ST_ERR_FORMAT naming the file and what is wrong. Decoding only: encoding text with
 * GPT-2's byte-pair merges needs the merge table, which this file does not hold. */
#ifndef ST_ENGINE_IO_TOKENIZER_H
#define ST_ENGINE_IO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "shardtrain.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_HEADER_INTS 256

typedef struct tokenizer tokenizer;

st_status tokenizer_load(tokenizer **out, const char *path);
/* NULL is accepted. */
void tokenizer_free(tokenizer *t);

/* Tokens in the file. */
int tokenizer_vocab(const tokenizer *t);
/* The end-of-text token, or -1 when the file (version 1) names none. */
int tokenizer_eot(const tokenizer *t);
/* The bytes of token `id` (0 <= id < tokenizer_vocab) and their count; valid until free. */
const unsigned char *tokenizer_bytes(const tokenizer *t, int id, size_t *len);

#endif /* ST_ENGINE_IO_TOKENIZER_H */
