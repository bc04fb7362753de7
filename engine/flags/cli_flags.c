/* cli_flags.c - parsing and help for cli_flags.h. */
#include "engine/flags/cli_flags.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const cli_flag *find_flag(const cli_flag *flags, int nflags, const char *name, size_t len) {
  for (int i = 0; i < nflags; i++) {
    if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0) return &flags[i];
  }
  return NULL;
}

static st_status set_value(const cli_flag *f, const char *text) {
  char *end = NULL;
  errno = 0;
  switch (f->type) {
    case FLAG_INT: {
      long long v = strtoll(text, &end, 10);
      if (end == text || *end || (errno && errno != ERANGE)) {
        return st_error(ST_ERR_INVALID_ARG, "--%s: '%s' is not an integer", f->name, text);
      }
      /* A well-formed integer that does not fit is a range error, not a malformed one. */
      if (errno == ERANGE || v < INT_MIN || v > INT_MAX) {
        return st_error(ST_ERR_INVALID_ARG, "--%s %s is out of range (at %s %d)", f->name, text,
                        text[0] == '-' ? "least" : "most", text[0] == '-' ? INT_MIN : INT_MAX);
      }
      *(int *)f->value = (int)v;
      return ST_OK;
    }
    case FLAG_DOUBLE: {
      double v = strtod(text, &end);
      /* ERANGE with a finite value is an underflow (4e-324): a number, judged by its flag */
      if (end == text || *end || (errno && errno != ERANGE) || !isfinite(v)) {
        return st_error(ST_ERR_INVALID_ARG, "--%s: '%s' is not a finite number", f->name, text);
      }
      *(double *)f->value = v;
      return ST_OK;
    }
    case FLAG_STRING: *(const char **)f->value = text; return ST_OK;
    case FLAG_BOOL:
      if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0) {
        *(int *)f->value = 1;
      } else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0) {
        *(int *)f->value = 0;
      } else {
        return st_error(ST_ERR_INVALID_ARG, "--%s: '%s' is not true or false", f->name, text);
      }
      return ST_OK;
  }
  return st_error(ST_ERR_INTERNAL, "--%s has no type", f->name);
}

st_status cli_parse(int argc, char **argv, int first, const cli_flag *flags, int nflags,
                    int *help_requested) {
  *help_requested = 0;
  for (int i = first; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      *help_requested = 1;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0) {
      return st_error(ST_ERR_INVALID_ARG, "unexpected argument '%s' (flags start with --)", arg);
    }
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const cli_flag *f = find_flag(flags, nflags, name, len);
    if (!f)
      return st_error(ST_ERR_INVALID_ARG, "unknown flag '--%.*s' (see --help)", (int)len, name);
    if (eq) {
      ST_CHECK(set_value(f, eq + 1));
    } else if (f->type == FLAG_BOOL) {
      *(int *)f->value = 1;
    } else if (i + 1 < argc) {
      ST_CHECK(set_value(f, argv[++i]));
    } else {
      return st_error(ST_ERR_INVALID_ARG, "--%s needs a value", f->name);
    }
  }
  return ST_OK;
}

static void print_default(FILE *out, const cli_flag *f) {
  switch (f->type) {
    case FLAG_INT: fprintf(out, " (default %d)", *(int *)f->value); break;
    case FLAG_DOUBLE: fprintf(out, " (default %g)", *(double *)f->value); break;
    case FLAG_STRING: {
      const char *v = *(const char **)f->value;
      if (v) fprintf(out, " (default %s)", v);
      break;
    }
    case FLAG_BOOL: fprintf(out, " (default %s)", *(int *)f->value ? "true" : "false"); break;
  }
}

void cli_print_help(FILE *out, const char *usage, const char *summary, const cli_flag *flags,
                    int nflags) {
  static const char *const placeholders[] = {"N", "X", "S", ""};
  fprintf(out, "usage: %s\n\n%s\n\nflags:\n", usage, summary);
  for (int i = 0; i < nflags; i++) {
    char left[64];
    snprintf(left, sizeof left, "--%s %s", flags[i].name, placeholders[flags[i].type]);
    fprintf(out, "  %-26s %s", left, flags[i].help);
    print_default(out, &flags[i]);
    fputc('\n', out);
  }
  fprintf(out, "  %-26s %s\n", "--help", "print this help");
}
