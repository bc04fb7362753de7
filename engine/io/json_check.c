/* json_check.c - see json_check.h. */
#include "engine/io/json_check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

/* The length of the UTF-8 sequence at s (at most n bytes), or 0 where it is not one: overlong
 * forms, surrogates and code points above U+10FFFF are not. */
static size_t utf8_sequence(const unsigned char *s, size_t n) {
  if (s[0] < 0x80) return 1;
  const size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
  if (len == 0 || len > n || s[0] > 0xf4) return 0;
  uint32_t cp = s[0] & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

/* JSON's whitespace: what may stand between its tokens and after the object. */
static int json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Where the text stops being UTF-8 text without control bytes (JSON escapes them in strings
 * and allows none elsewhere but its whitespace; cJSON would take a NUL for the end of a name),
 * the byte at which it does; else `bytes`. */
static size_t text_end(const char *text, size_t bytes) {
  const unsigned char *s = (const unsigned char *)text;
  for (size_t at = 0, len; at < bytes; at += len) {
    if ((s[at] < 0x20 && !json_space(text[at])) || (len = utf8_sequence(s + at, bytes - at)) == 0) {
      return at;
    }
  }
  return bytes;
}

/* Whether a string of the text escapes a NUL (a backslash, then u0000), which would end the
 * string cJSON decodes there (a name would become another): a backslash escapes after an even
 * run only. */
static int escapes_nul(const char *text) {
  for (const char *at = strstr(text, "\\u0000"); at; at = strstr(at + 1, "\\u0000")) {
    const char *run = at; /* the backslashes before this one */
    while (run > text && run[-1] == '\\') run--;
    if ((at - run) % 2 == 0) return 1;
  }
  return 0;
}

st_status json_read_object(const char *text, size_t bytes, const char *path, const char *what,
                           cJSON **out) {
  *out = NULL;
  const size_t end_of_text = text_end(text, bytes);
  if (end_of_text < bytes) {
    return st_error(ST_ERR_FORMAT,
                    "%s: %s is not UTF-8 text without control bytes (at byte %zu of %zu)", path,
                    what, end_of_text, bytes);
  }
  if (bytes == 0 || text[0] != '{') {
    return st_error(ST_ERR_FORMAT, "%s: %s is not a JSON object (it must begin with '{')", path,
                    what);
  }
  const char *end = NULL;
  *out = cJSON_ParseWithLengthOpts(text, bytes, &end, 0);
  size_t at = end ? (size_t)(end - text) : 0;
  if (!*out) {
    return st_error(ST_ERR_FORMAT, "%s: %s is not valid JSON (error near byte %zu of %zu)", path,
                    what, at, bytes);
  }
  while (at < bytes && json_space(text[at])) at++;
  if (at < bytes) {
    return st_error(ST_ERR_FORMAT,
                    "%s: %s has more than whitespace after its JSON object (byte %zu of %zu)", path,
                    what, at, bytes);
  }
  if (!cJSON_IsObject(*out)) {
    return st_error(ST_ERR_FORMAT, "%s: %s is not a JSON object", path, what);
  }
  if (escapes_nul(text)) {
    return st_error(ST_ERR_FORMAT, "%s: %s holds a string with a NUL (\\u0000)", path, what);
  }
  return ST_OK;
}

static int compare_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that `object`'s members share, or NULL. */
static st_status object_duplicate(const cJSON *object, const char **duplicate) {
  const int n = cJSON_GetArraySize(object);
  if (n < 2) return ST_OK;
  const char **keys = NULL;
  ST_CHECK(mem_alloc((void **)&keys, (size_t)n * sizeof *keys, MEM_HOST, MEM_WORKSPACE, NULL));
  int i = 0;
  const cJSON *member;
  cJSON_ArrayForEach(member, object) keys[i++] = member->string;
  qsort(keys, (size_t)n, sizeof *keys, compare_keys);
  for (i = 1; i < n && !*duplicate; i++) {
    if (strcmp(keys[i - 1], keys[i]) == 0) *duplicate = keys[i];
  }
  mem_free(keys);
  return ST_OK;
}

st_status json_find_duplicate_key(const cJSON *item, const char **duplicate) {
  *duplicate = NULL;
  if (cJSON_IsObject(item)) ST_CHECK(object_duplicate(item, duplicate));
  const cJSON *child;
  cJSON_ArrayForEach(child, item) {
    if (*duplicate) break;
    if (cJSON_IsObject(child) || cJSON_IsArray(child)) {
      ST_CHECK(json_find_duplicate_key(child, duplicate));
    }
  }
  return ST_OK;
}
