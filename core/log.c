/* log.c - the logger. Each line is formatted into one buffer and written with a single
 * fputs so that lines from concurrent ranks sharing a terminal do not interleave mid-line. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/env.h"

static int log_rank = -1;
static int log_level = -1; /* -1: not read from the environment yet */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static int configured_level(void) {
  if (log_level < 0) {
    const char *v = env_get_string(ENV_LOG_LEVEL);
    int level = -1;
    for (int i = 0; i <= ST_LOG_DEBUG; i++) {
      if (strcmp(v, level_names[i]) == 0) level = i;
    }
    log_level = level < 0 ? ST_LOG_INFO : level;
    if (level < 0) {
      st_log(ST_LOG_WARN, "ST_LOG_LEVEL='%s' is not error, warn, info or debug; logging at info",
             v);
    }
  }
  return log_level;
}

void st_log_set_rank(int rank) { log_rank = rank; }

int st_log_enabled(st_log_level level) { return (int)level <= configured_level(); }

void st_log(st_log_level level, const char *fmt, ...) {
  if (!st_log_enabled(level)) return;
  char line[2048];
  int n = 0;
  if (log_rank >= 0) n = snprintf(line, sizeof line, "[rank %d] ", log_rank);
  n += snprintf(line + n, sizeof line - (size_t)n, "%s: ", level_names[level]);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = strlen(line);
  line[len] = '\n';
  line[len + 1] = '\0';
  fputs(line, stderr);
}
