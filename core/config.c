/* config.c - copying a versioned public configuration struct over its defaults. */
#include "core/config.h"

#include <ctype.h>
#include <string.h>

#include "core/error.h"

st_status config_read(void *out, const void *defaults, size_t size, const void *config,
                      size_t min_size, const char *name) {
  memcpy(out, defaults, size);
  if (!config) return ST_OK;
  size_t given = 0;
  memcpy(&given, config, sizeof given);
  if (given < min_size || given > size) {
    char macro[64];
    size_t n = 0;
    for (; name[n] && n < sizeof macro - 1; n++) macro[n] = (char)toupper((unsigned char)name[n]);
    macro[n] = '\0';
    return st_error(ST_ERR_INVALID_ARG,
                    "%s.struct_size is %zu, not between %zu and %zu; initialise it with %s_INIT",
                    name, given, min_size, size, macro);
  }
  memcpy(out, config, given);
  memcpy(out, &size, sizeof size);
  return ST_OK;
}
