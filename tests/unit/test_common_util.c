/* test_common_util.c - common/json.c, common/buf.c, common/flags.c,
 * common/util.c (ctrain_read_file), common/clock.c (sleeps and naps). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/buf.h"
#include "ctrain/clock.h"
#include "ctrain/flags.h"
#include "ctrain/json.h"
#include "ctrain/util.h"
#include "test.h"
#include "test_fs.h"

TEST(json_accessors) {
  cJSON *o = cJSON_Parse("{\"a\":{\"b\":\"x\",\"n\":7.9,\"t\":true,\"big\":1e30},\"s\":3}");
  ASSERT(o);
  const char *path[] = {"a", "b"};
  ASSERT_STR_EQ(ctrain_json_path(o, 2, path)->valuestring, "x");
  ASSERT_STR_EQ(ctrain_json_str(ctrain_json_get(o, "a"), "b"), "x");
  ASSERT(ctrain_json_str(o, "s") == NULL);                        /* a number, not a string */
  ASSERT(ctrain_json_str(ctrain_json_get(o, "zz"), "b") == NULL); /* NULL object */
  ASSERT_EQ(ctrain_json_int(ctrain_json_get(o, "a"), "n", -1), 7);
  ASSERT_EQ(ctrain_json_int(ctrain_json_get(o, "a"), "b", -1), -1);
  ASSERT(ctrain_json_int(ctrain_json_get(o, "a"), "big", 0) == INT64_MAX);
  ASSERT_EQ(ctrain_json_bool(ctrain_json_get(o, "a"), "t", 0), 1);
  ASSERT_EQ(ctrain_json_bool(o, "s", 5), 5);
  ASSERT_EQ(ctrain_json_put(o, "s", cJSON_CreateString("y")), 1); /* replace */
  ASSERT_STR_EQ(ctrain_json_str(o, "s"), "y");
  ASSERT_EQ(ctrain_json_put(o, "new", cJSON_CreateNumber(2)), 1); /* add */
  ASSERT_EQ(ctrain_json_int(o, "new", 0), 2);
  ASSERT_EQ(ctrain_json_put(o, "x", NULL), 0);
  ASSERT_EQ(ctrain_json_put(NULL, "x", cJSON_CreateNull()), 0); /* taken and freed */
  cJSON_Delete(o);
}

TEST(json_int_in_refuses_out_of_range_and_fractions_naming_the_value) {
  cJSON *o = cJSON_Parse("{\"a\":4294967297,\"b\":2.5,\"c\":1e300,\"d\":\"7\",\"e\":-3,"
                         "\"f\":null,\"g\":9223372036854775807,\"h\":2147483647}");
  ASSERT_NOT_NULL(o);
  int64_t n = 0;
  char why[128];
  ASSERT_EQ(ctrain_json_int_in(o, "a", 0, INT32_MAX, 1, &n, "x.a", why, sizeof(why)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(why, "x.a: 4294967297 is outside 0..2147483647");
  ASSERT_EQ(n, 1); /* the default */
  ASSERT_EQ(ctrain_json_int_in(o, "b", 0, 10, 1, &n, "b", why, sizeof(why)), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(why, "b: 2.5 is not an integer");
  ASSERT_EQ(ctrain_json_int_in(o, "c", INT64_MIN, INT64_MAX, 1, &n, "c", why, sizeof(why)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(why, "c: 1e+300 is outside -9223372036854775808..9223372036854775807");
  ASSERT_EQ(ctrain_json_int_in(o, "d", 0, 10, 1, &n, "d", why, sizeof(why)), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(why, "d: \"7\" is not an integer");
  ASSERT_EQ(ctrain_json_int_in(o, "e", 0, 10, 1, &n, "e", why, sizeof(why)), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(why, "e: -3 is outside 0..10");
  ASSERT_EQ(ctrain_json_int_in(o, "g", INT64_MIN, INT64_MAX, 1, &n, "g", why, sizeof(why)),
            CTRAIN_E_INVAL); /* 2^63 as a double */
  ASSERT_OK(ctrain_json_int_in(o, "f", 0, 10, 5, &n, "f", why, sizeof(why)));
  ASSERT_EQ(n, 5);
  ASSERT_STR_EQ(why, "");
  ASSERT_OK(ctrain_json_int_in(o, "missing", 0, 10, 6, &n, "m", NULL, 0));
  ASSERT_EQ(n, 6);
  ASSERT_OK(ctrain_json_int_in(o, "h", 0, INT32_MAX, 1, &n, "h", why, sizeof(why)));
  ASSERT_EQ(n, INT32_MAX);
  ASSERT_OK(ctrain_json_int_in(o, "e", -3, -3, 1, &n, "e", why, sizeof(why)));
  ASSERT_EQ(n, -3);
  cJSON_Delete(o);
}

TEST(escape_ctl_escapes_control_bytes_and_truncates_at_an_escape) {
  char out[128];
  ASSERT_STR_EQ(
      ctrain_escape_ctl("a\nb\rc\td\x1b[0m\x7f\x01 \xc2\x9b\xc3\xa9\\n", out, sizeof(out)),
      "a\\nb\\rc\\td\\x1b[0m\\x7f\\x01 \\xc2\\x9b\xc3\xa9\\n");
  ASSERT_STR_EQ(ctrain_escape_ctl(NULL, out, sizeof(out)), "");
  ASSERT_STR_EQ(ctrain_escape_ctl("ab\x1b", out, 6), "ab"); /* \x1b needs 4 + NUL */
  ASSERT_STR_EQ(ctrain_escape_ctl("ab\x1b", out, 7), "ab\\x1b");
  ASSERT_STR_EQ(ctrain_escape_ctl("\xc2", out, sizeof(out)), "\xc2"); /* no C1: kept */
  ASSERT_STR_EQ(ctrain_escape_ctl("x", out, 1), "");
}

TEST(buf_grows_to_cap_and_no_further) {
  ctrain_buf b;
  ctrain_buf_init(&b, 10000);
  char *empty = ctrain_buf_take(&b, NULL);
  ASSERT_STR_EQ(empty, "");
  free(empty);
  char chunk[1000];
  memset(chunk, 'a', sizeof chunk);
  for (int i = 0; i < 10; i++)
    ASSERT_OK(ctrain_buf_append(&b, chunk, sizeof chunk));
  ASSERT_EQ(b.len, 10000);
  ASSERT_EQ(b.p[10000], '\0');
  ASSERT_EQ(ctrain_buf_append(&b, "x", 1), CTRAIN_E_TOOBIG);
  ASSERT_EQ(b.len, 10000); /* unchanged */
  ctrain_buf_clear(&b);
  ASSERT_OK(ctrain_buf_printf(&b, "%s-%d", "n", 42));
  size_t len = 0;
  char *s = ctrain_buf_take(&b, &len);
  ASSERT_STR_EQ(s, "n-42");
  ASSERT_EQ(len, 4);
  ASSERT(b.p == NULL && b.len == 0 && b.cap == 10000);
  free(s);
  ctrain_buf_free(&b);
}

TEST(grow_array) {
  int *a = NULL;
  size_t alloc = 0;
  ASSERT_OK(ctrain_grow(&a, &alloc, 3, sizeof *a, 2, 100));
  ASSERT_GE(alloc, 3);
  for (size_t i = 0; i < 3; i++)
    a[i] = (int)i;
  ASSERT_OK(ctrain_grow(&a, &alloc, 100, sizeof *a, 2, 100));
  ASSERT_EQ(alloc, 100);
  ASSERT_EQ(a[2], 2);
  ASSERT_EQ(ctrain_grow(&a, &alloc, 101, sizeof *a, 2, 100), CTRAIN_E_TOOBIG);
  ASSERT_EQ(alloc, 100);
  ASSERT_EQ(ctrain_grow(&a, &alloc, SIZE_MAX / 2, sizeof *a, 2, 0), CTRAIN_E_TOOBIG);
  free(a);
}

static int parse_even(const char *arg, void *dst) {
  int v = atoi(arg);
  if (v % 2)
    return -1;
  *(int *)dst = v;
  return 0;
}

typedef struct {
  const char *name, *fmt;
  int n, set, on, mode, even;
  double rate;
  uint64_t seed;
} opts;

static ctrain_err parse(opts *o, int argc, char **argv, char **pos, int *npos, char *err) {
  static const char *const fmts[] = {"text", "json", NULL};
  static const char *const modes[] = {"a", "b", "c", NULL};
  static const int mode_vals[] = {10, 20, 30};
  const ctrain_flag flags[] = {
      {.name = "name", .kind = CTRAIN_FLAG_STRING, .dst = &o->name},
      {.name = "n", .kind = CTRAIN_FLAG_INT, .dst = &o->n, .min = 1, .max = 256},
      {.name = "rate",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->rate,
       .min = 0,
       .max = 1,
       .excl = CTRAIN_FLAG_EXCL_MAX},
      {.name = "seed", .kind = CTRAIN_FLAG_U64, .dst = &o->seed},
      {.name = "set", .kind = CTRAIN_FLAG_SET, .dst = &o->set},
      {.name = "on", .kind = CTRAIN_FLAG_BOOL, .dst = &o->on},
      {.name = "fmt", .kind = CTRAIN_FLAG_CHOICE_STR, .dst = &o->fmt, .choices = fmts},
      {.name = "mode",
       .kind = CTRAIN_FLAG_CHOICE,
       .dst = &o->mode,
       .choices = modes,
       .values = mode_vals},
      {.name = "even",
       .kind = CTRAIN_FLAG_FUNC,
       .dst = &o->even,
       .parse = parse_even,
       .expect = "an even number"},
      {.name = NULL}};
  memset(o, 0, sizeof *o);
  o->on = 1;
  return ctrain_flags_parse(flags, argc, argv, NULL, pos, npos, err, 256);
}

#define ARGV(...)  ((char *[]){"prog", __VA_ARGS__, NULL})
#define ARGC(...)  ((int)(sizeof((char *[]){"prog", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(...) parse(&o, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), pos, &npos, err)

TEST(flags_every_kind) {
  opts o;
  char *pos[16], err[256] = "";
  int npos = 0;
  ASSERT_OK(PARSE("train", "--name", "x", "--n=7", "--rate", "0.5", "--seed",
                  "18446744073709551615", "--set", "--on=false", "--fmt", "json", "--mode", "c",
                  "--even", "4", "extra"));
  ASSERT_STR_EQ(o.name, "x");
  ASSERT_EQ(o.n, 7);
  ASSERT_NEAR(o.rate, 0.5, 0);
  ASSERT(o.seed == UINT64_MAX);
  ASSERT_EQ(o.set, 1);
  ASSERT_EQ(o.on, 0);
  ASSERT_STR_EQ(o.fmt, "json");
  ASSERT_EQ(o.mode, 30);
  ASSERT_EQ(o.even, 4);
  ASSERT_EQ(npos, 2);
  ASSERT_STR_EQ(pos[0], "train");
  ASSERT_STR_EQ(pos[1], "extra");
  ASSERT_OK(PARSE("--", "--n"));
  ASSERT_EQ(npos, 1);
  ASSERT_STR_EQ(pos[0], "--n");
}

TEST(flags_errors_name_the_flag) {
  opts o;
  char *pos[16], err[256] = "";
  int npos = 0;
  ASSERT_EQ(PARSE("--n", "0"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--n: '0' is not an integer in 1..256");
  ASSERT_EQ(PARSE("--n", "3x"), CTRAIN_E_INVAL);
  ASSERT_EQ(PARSE("--rate", "1"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--rate: '1' is not a number in [0, 1)");
  ASSERT_EQ(PARSE("--rate", "nan"), CTRAIN_E_INVAL);
  ASSERT_EQ(PARSE("--seed", "-1"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--seed: '-1' is not a non-negative integer");
  ASSERT_EQ(PARSE("--fmt", "xml"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--fmt: 'xml' is not text or json");
  ASSERT_EQ(PARSE("--mode", "d"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--mode: 'd' is not a, b or c");
  ASSERT_EQ(PARSE("--even", "3"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--even: '3' is not an even number");
  ASSERT_EQ(PARSE("--on=maybe"), CTRAIN_E_INVAL);
  ASSERT_EQ(PARSE("--set=1"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--set: takes no value");
  ASSERT_EQ(PARSE("--name"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--name: missing value");
  ASSERT_EQ(PARSE("--bogus=1"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--bogus: unknown flag");
  ASSERT_EQ(PARSE("-x"), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "-x: unknown flag");
}

TEST(flags_help) {
  char *pos[4];
  int npos = 0, help = 0;
  ctrain_flag none[] = {{.name = NULL}};
  char err[64];
  ASSERT_OK(ctrain_flags_parse(none, 2, ARGV("-h"), &help, pos, &npos, err, sizeof err));
  ASSERT_EQ(help, 1);
  ASSERT_OK(ctrain_flags_parse(none, 2, ARGV("--help"), &help, pos, &npos, err, sizeof err));
  ASSERT_EQ(help, 1);
}

TEST(read_file_cap_and_errors_name_the_path) {
  char dir[64], path[128], err[256];
  fs_make_dir(dir, sizeof dir, "ctrain-readfile");
  snprintf(path, sizeof path, "%s/f", dir);
  char *big = malloc(10001);
  ASSERT_NOT_NULL(big);
  memset(big, 'x', 10000);
  big[10000] = '\0';
  fs_put_file(path, big); /* 10000 bytes: several reads */
  char *out = NULL;
  size_t len = 0;
  ASSERT_OK(ctrain_read_file(path, 10000, &out, &len, err, sizeof err)); /* exactly the cap */
  ASSERT_EQ(len, 10000);
  ASSERT_EQ(out[10000], '\0');
  ASSERT(memcmp(out, big, 10000) == 0);
  free(out);
  out = NULL;
  ASSERT_EQ(ctrain_read_file(path, 9999, &out, &len, err, sizeof err), CTRAIN_E_TOOBIG);
  ASSERT_NULL(out);
  ASSERT_STR_CONTAINS(err, path);
  fs_put_file(path, "");
  ASSERT_OK(ctrain_read_file(path, 16, &out, &len, err, sizeof err));
  ASSERT_EQ(len, 0);
  ASSERT_STR_EQ(out, "");
  free(out);
  out = NULL;
  snprintf(path, sizeof path, "%s/missing", dir);
  ASSERT_EQ(ctrain_read_file(path, 16, &out, NULL, err, sizeof err), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, path);
  ASSERT_NULL(out);
  free(big);
  fs_rm_rf(dir);
}

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int flag;
} nap_ctx;

static void *set_flag_later(void *arg) {
  nap_ctx *n = arg;
  ctrain_sleep_ns(50 * 1000000LL);
  pthread_mutex_lock(&n->mu);
  n->flag = 1;
  pthread_cond_broadcast(&n->cv);
  pthread_mutex_unlock(&n->mu);
  return NULL;
}

TEST(clock_sleep_and_nap) {
  int64_t t0 = ctrain_mono_ns();
  ctrain_sleep_ns(20 * 1000000LL);
  ASSERT_GE(ctrain_mono_ns() - t0, 20 * 1000000LL);
  ctrain_sleep_ns(-5); /* nothing */

  nap_ctx n = {.flag = 0};
  pthread_mutex_init(&n.mu, NULL);
  ASSERT_EQ(ctrain_cond_init_mono(&n.cv), 0);
  t0 = ctrain_mono_ns();
  ASSERT_EQ(ctrain_cond_nap(&n.cv, &n.mu, &n.flag, 30 * 1000000LL), 0); /* times out */
  ASSERT_GE(ctrain_mono_ns() - t0, 30 * 1000000LL);

  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, set_flag_later, &n), 0);
  /* Woken by the broadcast, not by the timeout: the nap's timeout (an hour)
   * is far past ctest's TIMEOUT (300 s), so a nap that missed the wakeup
   * fails there; no wall-clock ceiling here (one flakes on a loaded
   * machine). The flag is set
   * either way, so the return alone cannot tell the two apart. */
  ASSERT_EQ(ctrain_cond_nap(&n.cv, &n.mu, &n.flag, 3600 * 1000000000LL), 1);
  pthread_join(th, NULL);
  ASSERT_EQ(ctrain_cond_nap(&n.cv, &n.mu, &n.flag, 20 * 1000000000LL), 1); /* set: no wait */
  pthread_cond_destroy(&n.cv);
  pthread_mutex_destroy(&n.mu);
}

TEST_MAIN(T(json_accessors), T(json_int_in_refuses_out_of_range_and_fractions_naming_the_value),
          T(escape_ctl_escapes_control_bytes_and_truncates_at_an_escape),
          T(buf_grows_to_cap_and_no_further), T(grow_array), T(flags_every_kind),
          T(flags_errors_name_the_flag), T(flags_help), T(read_file_cap_and_errors_name_the_path),
          T(clock_sleep_and_nap))
