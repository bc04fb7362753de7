/* env_test.c - proves the environment table of core/env.h: every variable is declared with a
 * name, default and meaning; an unset or empty variable reads as its default; a set one reads
 * as set; and ST_COMM_TIMEOUT accepts only a finite positive number, falling back to its
 * default with ok = 0 for anything else; env_lookup reads unset and empty as NULL; any launcher's
 * variable marks a launched rank. */
#include "core/env.h"

#include <stdlib.h>
#include <string.h>

#include "tests/testing.h"

static void unset_all(void) {
  for (int v = 0; v < ENV_VAR_COUNT; v++) unsetenv(env_table()[v].name);
}

static void test_table(void) {
  static const char *const names[ENV_VAR_COUNT] = {
      [ENV_LOG_LEVEL] = "ST_LOG_LEVEL",
      [ENV_COMM_TIMEOUT] = "ST_COMM_TIMEOUT",
      [ENV_DEVICE] = "ST_DEVICE",
      [ENV_CKPT_TEST_DELAY_MS] = "ST_CKPT_TEST_DELAY_MS",
      [ENV_MEMORY_LIMIT_BYTES] = "ST_MEMORY_LIMIT_BYTES",
      [ENV_NCCL_HOSTID] = "NCCL_HOSTID",
      [ENV_TEST_INJECT_OVERFLOW] = "ST_TEST_INJECT_OVERFLOW",
      [ENV_CUDA_ATTENTION] = "ST_CUDA_ATTENTION",
      [ENV_OMPI_WORLD_SIZE] = "OMPI_COMM_WORLD_SIZE",
      [ENV_PMI_SIZE] = "PMI_SIZE",
      [ENV_PMIX_RANK] = "PMIX_RANK",
      [ENV_IO_TIMEOUT] = "ST_IO_TIMEOUT",
      [ENV_WRITE_TEST_DELAY_MS] = "ST_WRITE_TEST_DELAY_MS",
      [ENV_SLURM_STEP_TASKS] = "SLURM_STEP_NUM_TASKS",
      [ENV_TEST_NODE] = "ST_TEST_NODE",
  };
  const env_entry *table = env_table();
  for (int v = 0; v < ENV_VAR_COUNT; v++) {
    CHECK_MSG(table[v].name && strcmp(table[v].name, names[v]) == 0, "entry %d is %s", v,
              table[v].name ? table[v].name : "(null)");
    CHECK_MSG(table[v].default_value && table[v].default_value[0], "%s has no default", names[v]);
    CHECK_MSG(table[v].meaning && table[v].meaning[0], "%s has no meaning", names[v]);
  }
}

static void test_defaults_when_unset(void) {
  unset_all();
  CHECK(strcmp(env_get_string(ENV_LOG_LEVEL), "info") == 0);
  CHECK(strcmp(env_get_string(ENV_COMM_TIMEOUT), "300") == 0);
  CHECK(strcmp(env_get_string(ENV_IO_TIMEOUT), "1800") == 0);
  CHECK(strcmp(env_get_string(ENV_DEVICE), "auto") == 0);
  CHECK(strcmp(env_get_string(ENV_MEMORY_LIMIT_BYTES), "none") == 0);
  CHECK(strcmp(env_get_string(ENV_TEST_INJECT_OVERFLOW), "none") == 0);
  int ok = 0;
  double timeout = env_get_positive(ENV_COMM_TIMEOUT, &ok);
  CHECK(ok);
  CHECK(timeout == 300.0);

  /* An empty value counts as unset: `ST_DEVICE= cmd` must not select a device named "". */
  setenv("ST_DEVICE", "", 1);
  setenv("ST_COMM_TIMEOUT", "", 1);
  CHECK(strcmp(env_get_string(ENV_DEVICE), "auto") == 0);
  timeout = env_get_positive(ENV_COMM_TIMEOUT, &ok);
  CHECK(ok);
  CHECK(timeout == 300.0);
  unset_all();
}

static void test_set_values(void) {
  setenv("ST_LOG_LEVEL", "debug", 1);
  setenv("ST_DEVICE", "cuda", 1);
  CHECK(strcmp(env_get_string(ENV_LOG_LEVEL), "debug") == 0);
  CHECK(strcmp(env_get_string(ENV_DEVICE), "cuda") == 0);
  CHECK(strcmp(env_get_string(ENV_COMM_TIMEOUT), "300") == 0); /* the others are untouched */

  const struct {
    const char *text;
    double value;
  } good[] = {{"45", 45.0}, {"2.5", 2.5}, {"1e3", 1000.0}, {"0.001", 0.001}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    setenv("ST_COMM_TIMEOUT", good[i].text, 1);
    int ok = 0;
    double timeout = env_get_positive(ENV_COMM_TIMEOUT, &ok);
    CHECK_MSG(ok && timeout == good[i].value, "ST_COMM_TIMEOUT=%s read as %g, ok %d", good[i].text,
              timeout, ok);
  }
  unset_all();
}

static void test_bad_timeouts(void) {
  /* Infinity and NaN are refused too: the timeout becomes a deadline in integer time units. */
  const char *bad[] = {"abc", "-5",  "0",   "-0.0",     "10s",  "5 ",
                       " ",   "nan", "inf", "infinity", "1e999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("ST_COMM_TIMEOUT", bad[i], 1);
    int ok = 1;
    double timeout = env_get_positive(ENV_COMM_TIMEOUT, &ok);
    CHECK_MSG(!ok, "ST_COMM_TIMEOUT=\"%s\" was accepted as %g", bad[i], timeout);
    CHECK_MSG(timeout == 300.0, "ST_COMM_TIMEOUT=\"%s\" gave %g, not the default", bad[i], timeout);
  }
  unset_all();
}

/* env_lookup tells unset (and empty) apart from any value, the default's text included;
 * env_is_set_empty tells empty apart from unset. */
static void test_lookup(void) {
  unset_all();
  CHECK(env_lookup(ENV_NCCL_HOSTID) == NULL);
  CHECK(!env_is_set_empty(ENV_NCCL_HOSTID));
  setenv("NCCL_HOSTID", "", 1);
  CHECK(env_lookup(ENV_NCCL_HOSTID) == NULL);
  CHECK(env_is_set_empty(ENV_NCCL_HOSTID));
  setenv("NCCL_HOSTID", "unset", 1);
  CHECK(env_lookup(ENV_NCCL_HOSTID) && strcmp(env_lookup(ENV_NCCL_HOSTID), "unset") == 0);
  CHECK(!env_is_set_empty(ENV_NCCL_HOSTID));
  setenv("NCCL_HOSTID", "rank-3", 1);
  CHECK(env_lookup(ENV_NCCL_HOSTID) && strcmp(env_lookup(ENV_NCCL_HOSTID), "rank-3") == 0);
  unset_all();
}

/* The launchers' task counts: an MPI launcher's over srun's (an mpirun -np 1 inside an
 * allocation of 8 tasks started one), naming its variable; none that is a number is 0. */
static void test_launched_tasks(void) {
  unset_all();
  const char *name = NULL;
  CHECK_EQ_INT(env_launched_tasks(&name), 0);
  setenv("SLURM_STEP_NUM_TASKS", "8", 1);
  setenv("PMI_SIZE", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "many", 1);
  CHECK_EQ_INT(env_launched_tasks(&name), 1);
  CHECK(name && strcmp(name, "PMI_SIZE") == 0);
  unsetenv("PMI_SIZE");
  CHECK_EQ_INT(env_launched_tasks(&name), 8);
  CHECK(name && strcmp(name, "SLURM_STEP_NUM_TASKS") == 0);
  unset_all();
}

/* Each launcher's variable alone marks a launched rank; none (or only empty ones) a singleton. */
static void test_launcher(void) {
  unset_all();
  CHECK(!env_launched_by_mpi());
  const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    setenv(names[i], "", 1);
    CHECK_MSG(!env_launched_by_mpi(), "an empty %s read as a launcher's", names[i]);
    setenv(names[i], "0", 1);
    CHECK_MSG(env_launched_by_mpi(), "%s=0 not read as a launcher's", names[i]);
    unsetenv(names[i]);
  }
}

int main(void) {
  test_table();
  test_launcher();
  test_launched_tasks();
  test_lookup();
  test_defaults_when_unset();
  test_set_values();
  test_bad_timeouts();
  return test_finish("env_test");
}
