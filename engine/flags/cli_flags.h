/* cli_flags.h - table-driven command-line flags for the shardtrain subcommands.
 *
 * Each subcommand declares its flags once (name, type, where the value goes, help text);
 * the same table parses argv and prints --help, so the help can never miss a flag.
 * Accepts `--name value` and `--name=value`; booleans accept a bare `--name` or
 * `--name=true|false`. Unknown flags, missing values, malformed numbers and integers beyond
 * int's range ("--steps 3000000000 is out of range (at most 2147483647)") are errors that name
 * the flag and the value. */
#ifndef ST_ENGINE_FLAGS_CLI_FLAGS_H
#define ST_ENGINE_FLAGS_CLI_FLAGS_H

#include <stdio.h>

#include "shardtrain.h"

typedef enum cli_flag_type { FLAG_INT, FLAG_DOUBLE, FLAG_STRING, FLAG_BOOL } cli_flag_type;

typedef struct cli_flag {
  const char *name; /* without the leading "--" */
  cli_flag_type type;
  void *value;      /* int*, double*, const char**, or int* for FLAG_BOOL */
  const char *help; /* one line; the default is printed from the current value */
} cli_flag;

/* Parses argv[first..argc) into the flags. Returns ST_ERR_INVALID_ARG with a message naming
 * the offending flag; sets *help_requested when --help or -h is present. */
st_status cli_parse(int argc, char **argv, int first, const cli_flag *flags, int nflags,
                    int *help_requested);

void cli_print_help(FILE *out, const char *usage, const char *summary, const cli_flag *flags,
                    int nflags);

#endif /* ST_ENGINE_FLAGS_CLI_FLAGS_H */
