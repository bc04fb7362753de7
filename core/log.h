/* log.h - leveled logging to stderr with a rank prefix ("[rank 3] warn: ...").
 *
 * The level comes from $ST_LOG_LEVEL (error, warn, info, debug; default info) the first time
 * anything is logged. The rank prefix is process-wide: the mesh sets it once MPI is up. */
#ifndef ST_CORE_LOG_H
#define ST_CORE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_log_level {
  ST_LOG_ERROR = 0,
  ST_LOG_WARN = 1,
  ST_LOG_INFO = 2,
  ST_LOG_DEBUG = 3
} st_log_level;

void st_log(st_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets the rank printed in front of every line (-1: no prefix). */
void st_log_set_rank(int rank);

/* Whether a message at `level` would be printed. */
int st_log_enabled(st_log_level level);

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_LOG_H */
