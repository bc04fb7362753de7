/* json_check.h - the engine's JSON readers' (the checkpoint manifest's, the safetensors
 * header's) parse of a whole text, and what they check beyond cJSON: cJSON keeps every member of
 * an object, and its lookups return the first, so a key written twice would be read as one of
 * its values without a word. */
#ifndef ST_ENGINE_IO_JSON_CHECK_H
#define ST_ENGINE_IO_JSON_CHECK_H

#include <cjson/cJSON.h>

#include "shardtrain.h"

/* Parses `text`, `bytes` characters and a terminating NUL, as one JSON object read whole: UTF-8
 * without control bytes (JSON escapes them in strings), the object from the first byte, then
 * whitespace only, no string escaping a NUL (cJSON would end it there). Else ST_ERR_FORMAT
 * naming `path`, `what` ("header", "manifest") and the byte at fault. *out is then the caller's
 * to cJSON_Delete (NULL or a tree, on failure too). */
st_status json_read_object(const char *text, size_t bytes, const char *path, const char *what,
                           cJSON **out);

/* *duplicate = the first key found twice in one object anywhere in `item` (objects and arrays
 * nested to any depth; a pointer into `item`), or NULL. Each object's keys are sorted, so a
 * large object costs n log n. ST_ERR_OOM when the sort's table cannot be allocated. */
st_status json_find_duplicate_key(const cJSON *item, const char **duplicate);

#endif /* ST_ENGINE_IO_JSON_CHECK_H */
