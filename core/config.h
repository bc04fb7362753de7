/* config.h - reading the public configuration structs (st_mesh_config, st_unit_config, ...).
 * Each starts with `size_t struct_size`, set by its INIT macro to the size the caller was
 * compiled with, so a struct can grow: a caller built against an older, smaller version gets
 * the new fields' defaults. Nothing here knows any particular struct. */
#ifndef ST_CORE_CONFIG_H
#define ST_CORE_CONFIG_H

#include <stddef.h>

#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies `config` over `defaults` into `out`, all three of type `name` and `size` bytes in
 * this build. config may be NULL (the defaults). Its struct_size must lie in [min_size, size]:
 * min_size covers the fields every version has. out's struct_size becomes `size`. */
st_status config_read(void *out, const void *defaults, size_t size, const void *config,
                      size_t min_size, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_CONFIG_H */
