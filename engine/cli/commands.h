/* commands.h - the shardtrain subcommands. Each takes the full argv (argv[1] is its name),
 * returns the process exit code (0 ok, 1 runtime failure, 2 bad input) and prints its own
 * error line. */
#ifndef ST_ENGINE_CLI_COMMANDS_H
#define ST_ENGINE_CLI_COMMANDS_H

int cmd_selftest(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_reshard(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
/* `plan --fit` (cmd_plan_fit.c); cmd_plan hands over when --fit is given. */
int cmd_plan_fit(int argc, char **argv);

/* Exit code for a status: 2 for a request that cannot be met as given (bad value, no such
 * device, unsupported here), 1 for everything else that failed. */
int exit_code_for(int status);

#endif /* ST_ENGINE_CLI_COMMANDS_H */
