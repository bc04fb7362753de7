/* sha256.h - SHA-256 (FIPS 180-4) of byte streams and files, for the checksums of checkpoint
 * files. Incremental: init, update any number of times, final. */
#ifndef ST_ENGINE_IO_SHA256_H
#define ST_ENGINE_IO_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "shardtrain.h"

typedef struct sha256_state {
  uint32_t h[8];
  uint64_t length; /* bytes hashed so far */
  uint8_t block[64];
  size_t used; /* bytes of `block` filled */
} sha256_state;

/* 64 lowercase hex digits and a terminating NUL. */
#define SHA256_HEX_SIZE 65

void sha256_init(sha256_state *s);
void sha256_update(sha256_state *s, const void *data, size_t bytes);
/* Writes the digest as hex into `hex` (SHA256_HEX_SIZE bytes). */
void sha256_final(sha256_state *s, char hex[SHA256_HEX_SIZE]);

/* The digest and size of the file at `path`; an unreadable file is ST_ERR_IO naming it. */
st_status sha256_file(const char *path, char hex[SHA256_HEX_SIZE], uint64_t *bytes);

#endif /* ST_ENGINE_IO_SHA256_H */
