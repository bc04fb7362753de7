/* loss_scaler_test.c - the loss scale's state machine against sequences worked out by hand:
 * an overflow skips and halves, `window` clean steps in a row double (an overflow in between
 * restarts the count), halving stops at the floor and doubling at the ceiling (2^24), a
 * fixed scale never changes but still skips, a checkpoint's state is taken only where it is
 * one a dynamic scaler holds, mode none never skips, and a state copied out and into a fresh scaler
 * (what a checkpoint does) continues exactly like the scaler it came from. */
#include "optim/loss_scaler.h"

#include "tests/testing.h"

/* Runs `outcomes` ('o' overflow, '.' clean) and checks the applied steps ('a' / 's'). */
static void run(loss_scaler *s, const char *outcomes, const char *want_applied) {
  for (int i = 0; outcomes[i]; i++) {
    const int applied = loss_scaler_update(s, outcomes[i] == 'o');
    CHECK_MSG(applied == (want_applied[i] == 'a'), "step %d of '%s': applied %d", i, outcomes,
              applied);
  }
}

static void test_dynamic(void) {
  loss_scaler s;
  loss_scaler_init_dynamic(&s, 65536.0, 3);
  run(&s, "o", "s");
  CHECK(s.state.scale == 32768.0 && s.state.skipped == 1 && s.state.clean_steps == 0);
  run(&s, "..", "aa");
  CHECK(s.state.scale == 32768.0 && s.state.clean_steps == 2);
  run(&s, ".", "a"); /* the third clean step in a row doubles */
  CHECK(s.state.scale == 65536.0 && s.state.clean_steps == 0);
  run(&s, "..o..", "aasaa"); /* an overflow restarts the window */
  CHECK(s.state.scale == 32768.0 && s.state.clean_steps == 2 && s.state.skipped == 2);
  run(&s, ".", "a");
  CHECK(s.state.scale == 65536.0);
  run(&s, "oo", "ss");
  CHECK(s.state.scale == 16384.0 && s.state.skipped == 4);
}

static void test_floor(void) {
  loss_scaler s;
  loss_scaler_init_dynamic(&s, 4.0, 1000);
  CHECK(!loss_scaler_at_floor(&s));
  run(&s, "ooo", "sss");
  CHECK(s.state.scale == 1.0 && loss_scaler_at_floor(&s));
  run(&s, "o", "s");
  CHECK_MSG(s.state.scale == 1.0, "halving stops at %g, got %g", LOSS_SCALER_MIN_SCALE,
            s.state.scale);
}

static void test_fixed_and_none(void) {
  loss_scaler s;
  loss_scaler_init_fixed(&s, 128.0);
  run(&s, "o..o.....", "saasaaaaa");
  CHECK(s.state.scale == 128.0 && s.state.skipped == 2 && !loss_scaler_at_floor(&s));
  loss_scaler_init_fixed(&s, 1.0);
  run(&s, "o", "s");
  CHECK_MSG(!loss_scaler_at_floor(&s), "a fixed scale of 1 is not a dynamic floor");
  loss_scaler_init_none(&s);
  run(&s, "o.o", "aaa");
  CHECK(s.state.scale == 1.0 && s.state.skipped == 0);
}

/* A scaler saved mid-window and restored into a fresh one behaves as the original does. */
static void test_state_round_trip(void) {
  loss_scaler a, b;
  loss_scaler_init_dynamic(&a, 65536.0, 4);
  run(&a, "o..", "saa");
  loss_scaler_state saved = a.state;
  loss_scaler_init_dynamic(&b, 65536.0, 4);
  b.state = saved;
  const char *rest = "..o....o.";
  for (int i = 0; rest[i]; i++) {
    const int applied_a = loss_scaler_update(&a, rest[i] == 'o');
    const int applied_b = loss_scaler_update(&b, rest[i] == 'o');
    CHECK_MSG(applied_a == applied_b && a.state.scale == b.state.scale &&
                  a.state.clean_steps == b.state.clean_steps && a.state.skipped == b.state.skipped,
              "step %d after the restore", i);
  }
  CHECK(a.state.scale == 32768.0 && a.state.skipped == 3);
}

/* Doubling stops at LOSS_SCALER_MAX_SCALE: 2^23 doubles once, then stays. */
static void test_ceiling(void) {
  loss_scaler s;
  loss_scaler_init_dynamic(&s, 8388608.0, 1);
  run(&s, "...", "aaa");
  CHECK_MSG(s.state.scale == 16777216.0, "doubling stops at 2^24, got %g", s.state.scale);
  run(&s, "o", "s");
  CHECK(s.state.scale == 8388608.0);
}

/* A checkpoint's state: a dynamic scaler takes a power of two from 1 to 2^24 with its window
 * count, and starts anew from any other scale; a fixed one keeps its own; the skipped steps
 * carry on either way. */
static void test_adopt(void) {
  const struct {
    double saved;
    int adopted;
  } cases[] = {{1024.0, 1}, {1.0, 1}, {16777216.0, 1}, {1000.0, 0}, {0.5, 0}, {33554432.0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const loss_scaler_state saved = {cases[i].saved, 5, 3};
    loss_scaler s;
    loss_scaler_init_dynamic(&s, 65536.0, 10);
    CHECK_EQ_INT(loss_scaler_adopt(&s, &saved), cases[i].adopted);
    const double want = cases[i].adopted ? cases[i].saved : 65536.0;
    CHECK_MSG(s.state.scale == want && s.state.clean_steps == (cases[i].adopted ? 5 : 0) &&
                  s.state.skipped == 3,
              "saved scale %g: scale %g, clean %lld, skipped %lld", cases[i].saved, s.state.scale,
              (long long)s.state.clean_steps, (long long)s.state.skipped);
  }
  const loss_scaler_state saved = {4096.0, 5, 3};
  loss_scaler s;
  loss_scaler_init_fixed(&s, 8.0);
  CHECK_EQ_INT(loss_scaler_adopt(&s, &saved), 0);
  CHECK(s.state.scale == 8.0 && s.state.skipped == 3);
}

int main(void) {
  test_dynamic();
  test_floor();
  test_fixed_and_none();
  test_state_round_trip();
  test_ceiling();
  test_adopt();
  return test_finish("loss_scaler_test");
}
