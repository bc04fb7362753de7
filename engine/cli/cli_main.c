/* cli_main.c - `shardtrain`: dispatches to a subcommand. The only place that decides the
 * process's exit code (0 ok, 1 failure, 2 bad input). */
#include <stdio.h>
#include <string.h>

#include "engine/cli/commands.h"
#include "shardtrain.h"

typedef struct subcommand {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"train", cmd_train, "train a GPT-2 model on token shards"},
    {"plan", cmd_plan, "predict memory and communication per rank for every mesh and stage"},
    {"sample", cmd_sample, "continue a prompt with a trained model (one rank, key/value cache)"},
    {"selftest", cmd_selftest, "check and time every collective on every group of a mesh"},
    {"reshard", cmd_reshard, "rewrite a checkpoint for another mesh and stage (one process)"},
    {"export", cmd_export, "write a checkpoint as a Hugging Face GPT-2 safetensors file"},
    {"inspect", cmd_inspect, "print a checkpoint's manifest and verify its checksums"},
    {"simulate", cmd_simulate, "predict one step's time, MFU and memory on a described cluster"},
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: shardtrain <command> [flags]   (launch with mpirun -np N or srun for N ranks)\n"
          "\ncommands:\n");
  for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++) {
    fprintf(out, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
  }
  fprintf(out, "\n`shardtrain <command> --help` lists the command's flags. shardtrain %s\n",
          st_version());
}

int exit_code_for(int status) {
  switch (status) {
    case ST_OK: return 0;
    /* The request itself cannot be met here: the user must change the command. */
    case ST_ERR_INVALID_ARG:
    case ST_ERR_NO_DEVICE:
    case ST_ERR_UNSUPPORTED: return 2;
    default: return 1;
  }
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++) {
    if (strcmp(argv[1], subcommands[i].name) == 0) return subcommands[i].run(argc, argv);
  }
  fprintf(stderr, "shardtrain: error: unknown command '%s' (see shardtrain --help)\n", argv[1]);
  return 2;
}
