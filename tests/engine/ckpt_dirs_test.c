/* ckpt_dirs_test.c - the checkpoint directory's moves where a crash or a failure could lose a
 * checkpoint, or leave part of one under a step_<N> name (found by a crash-injection review):
 * - --keep's removal of an old checkpoint that fails midway (here: a subdirectory the flat
 *   removal cannot unlink) leaves no step_<N> (which --resume would take for complete) but a
 *   .step_<N>.tmp, which the next save removes, and is a warning, not the save's failure;
 * - publishing over a checkpoint of the same step swaps them: step_<N> is the new one, and
 *   nothing of the old one stays; where the file system cannot swap (renameat2 fails with
 *   EINVAL, as on NFS) the old one is moved aside instead, and put back when the new one cannot
 *   be renamed in; another failure of the swap is the save's error, step_<N> untouched. The
 *   failures are injected by this file's own rename and renameat2, which the linker takes
 *   over the C library's;
 * - a checkpoint a crash left at .step_<N>.old while it was replaced is put back by
 *   ckpt_dir_claim, or removed where its replacement is in place;
 * - step_<N> names: decimal digits without a leading zero (step_05 would be a second name of
 *   step 5, and --keep would remove the checkpoint saved as step_5 in its stead);
 * - ckpt_dir_claim holds the directory: a second claim (another job) is refused naming the
 *   holder, and a claim after the first is released succeeds. */
#include "engine/checkpoint/ckpt_dirs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/checkpoint/checkpoint.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

/* The injected failures: the errno renameat2 fails with (0: none), and which call of rename
 * from now on fails with EIO (0: none). */
static int swap_errno;
static int rename_calls, failing_rename;

int renameat2(int from_dir, const char *from, int to_dir, const char *to, unsigned int flags) {
  if (swap_errno != 0) {
    errno = swap_errno;
    return -1;
  }
  return (int)syscall(SYS_renameat2, from_dir, from, to_dir, to, flags);
}

int rename(const char *from, const char *to) {
  if (++rename_calls == failing_rename) {
    errno = EIO;
    return -1;
  }
  return renameat(AT_FDCWD, from, AT_FDCWD, to);
}

static void inject(int swap_fails_with, int rename_that_fails) {
  swap_errno = swap_fails_with;
  rename_calls = 0;
  failing_rename = rename_that_fails;
}

static int exists(const char *dir, const char *name) {
  char path[600];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return stat(path, &st) == 0;
}

/* dir/name as a complete checkpoint whose one file holds `content`. */
static void make_step(const char *dir, const char *name, const char *content) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  CHECK(mkdir(path, 0777) == 0);
  snprintf(path, sizeof path, "%s/%s/rank_00000.safetensors", dir, name);
  test_write_file(path, content, strlen(content));
  snprintf(path, sizeof path, "%s/%s/DONE", dir, name);
  test_write_file(path, "step\n", 5);
}

static int holds(const char *dir, const char *name, const char *content) {
  char path[600], text[64] = {0};
  snprintf(path, sizeof path, "%s/%s/rank_00000.safetensors", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  const size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  return n == strlen(content) && memcmp(text, content, n) == 0;
}

static void removal_fails_midway(void) {
  char dir[512], sub[600];
  test_make_dir(dir, sizeof dir, "tidy");
  make_step(dir, "step_1", "one");
  make_step(dir, "step_2", "two");
  snprintf(sub, sizeof sub, "%s/step_1/stray", dir); /* file_remove_flat_dir cannot unlink it */
  CHECK(mkdir(sub, 0777) == 0);
  CHECK_OK(ckpt_dirs_tidy(dir, 1, 2));
  CHECK_MSG(!exists(dir, "step_1"), "a half-removed step_1 is left for --resume");
  CHECK(exists(dir, ".step_1.tmp"));
  CHECK(holds(dir, "step_2", "two"));
  snprintf(sub, sizeof sub, "%s/.step_1.tmp/stray", dir); /* moved with it; now removable */
  CHECK(rmdir(sub) == 0);
  char temp[600];
  snprintf(temp, sizeof temp, "%s/.step_3.tmp", dir);
  CHECK_OK(ckpt_dirs_prepare(dir, temp));
  CHECK_MSG(!exists(dir, ".step_1.tmp"), "the next save does not remove the leftover");
}

static void publish_over_same_step(void) {
  char dir[512], temp[600], final[600];
  test_make_dir(dir, sizeof dir, "publish");
  make_step(dir, "step_3", "old");
  make_step(dir, ".step_3.tmp", "new");
  snprintf(temp, sizeof temp, "%s/.step_3.tmp", dir);
  snprintf(final, sizeof final, "%s/step_3", dir);
  CHECK_OK(ckpt_dirs_publish(dir, temp, final, 3));
  CHECK(holds(dir, "step_3", "new"));
  CHECK(!exists(dir, ".step_3.tmp") && !exists(dir, ".step_3.old"));
}

/* step_3 holding "old" and its replacement at .step_3.tmp holding "new", in a new directory;
 * `temp` and `final` are their paths. */
static void replacement_ready(const char *name, char *dir, char *temp, char *final) {
  test_make_dir(dir, 512, name);
  make_step(dir, "step_3", "old");
  make_step(dir, ".step_3.tmp", "new");
  snprintf(temp, 600, "%s/.step_3.tmp", dir);
  snprintf(final, 600, "%s/step_3", dir);
}

static void publish_where_no_swap(void) {
  char dir[512], temp[600], final[600];
  replacement_ready("noswap", dir, temp, final);
  inject(EINVAL, 0);
  CHECK_OK(ckpt_dirs_publish(dir, temp, final, 3));
  CHECK(holds(dir, "step_3", "new"));
  CHECK(!exists(dir, ".step_3.tmp") && !exists(dir, ".step_3.old"));

  replacement_ready("noswap_fails", dir, temp, final);
  inject(EINVAL, 2); /* the first moves step_3 aside, the second would rename the new one in */
  CHECK_STATUS(ckpt_dirs_publish(dir, temp, final, 3), ST_ERR_IO);
  CHECK_MSG(holds(dir, "step_3", "old"), "the checkpoint moved aside is not back");
  CHECK(!exists(dir, ".step_3.old"));

  replacement_ready("swap_fails", dir, temp, final);
  inject(EIO, 0);
  CHECK_STATUS(ckpt_dirs_publish(dir, temp, final, 3), ST_ERR_IO);
  CHECK_MSG(strstr(st_last_error(), "cannot swap in the new checkpoint") != NULL, "'%s'",
            st_last_error());
  CHECK(holds(dir, "step_3", "old") && !exists(dir, ".step_3.old"));
  inject(0, 0);
}

static void claim_recovers_and_locks(void) {
  char dir[512];
  test_make_dir(dir, sizeof dir, "claim");
  make_step(dir, ".step_4.old", "aside"); /* a crash between replace_aside's renames */
  make_step(dir, ".step_2.old", "stale");
  make_step(dir, "step_2", "replacement");
  int fd = -1, second = -1;
  CHECK_OK(ckpt_dir_claim(dir, &fd));
  CHECK_MSG(holds(dir, "step_4", "aside"), "the checkpoint left aside is not back");
  CHECK(!exists(dir, ".step_4.old") && !exists(dir, ".step_2.old"));
  CHECK(holds(dir, "step_2", "replacement"));
  char want[64];
  snprintf(want, sizeof want, "is in use by another job (pid %d on ", (int)getpid());
  CHECK_STATUS(ckpt_dir_claim(dir, &second), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "'%s'", st_last_error());
  CHECK(second == -1);
  close(fd);
  CHECK_OK(ckpt_dir_claim(dir, &second));
  if (second >= 0) close(second);
}

static void step_names(void) {
  CHECK_EQ_INT(ckpt_step_of_name("step_5"), 5);
  CHECK_EQ_INT(ckpt_step_of_name("step_0"), 0);
  CHECK_EQ_INT(ckpt_step_of_name("step_05"), -1);
  CHECK_EQ_INT(ckpt_step_of_name("step_+5"), -1);
  CHECK_EQ_INT(ckpt_step_of_name("step_5x"), -1);
  CHECK_EQ_INT(ckpt_step_of_dir("out/step_3/"), 3);
  CHECK_EQ_INT(ckpt_step_of_dir("step_3"), 3);
  CHECK_EQ_INT(ckpt_step_of_dir("out/.step_3.tmp"), -1);
}

int main(void) {
  step_names();
  removal_fails_midway();
  publish_over_same_step();
  publish_where_no_swap();
  claim_recovers_and_locks();
  return test_finish("ckpt_dirs_test");
}
