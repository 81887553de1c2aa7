/* test_log.c - log levels, text and JSON lines with escaping. */
#include "test.h"

#include "ctrain/log.h"

static char *capture(ctrain_log_level min, ctrain_log_format fmt, ctrain_log_level lvl,
                     const char *msg) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ASSERT_NOT_NULL(f);
  ctrain_log_init("unit", min, fmt);
  ctrain_log_set_stream(f);
  ctrain_log(lvl, "%s", msg);
  ctrain_log_set_stream(NULL);
  fclose(f);
  return buf;
}

TEST(level_filter) {
  char *s = capture(CTRAIN_LOG_WARN, CTRAIN_LOG_TEXT, CTRAIN_LOG_INFO, "hidden");
  ASSERT_EQ(strlen(s), 0);
  free(s);
  s = capture(CTRAIN_LOG_WARN, CTRAIN_LOG_TEXT, CTRAIN_LOG_ERROR, "shown");
  ASSERT_STR_CONTAINS(s, "error");
  ASSERT_STR_CONTAINS(s, "unit: shown\n");
  free(s);
}

TEST(json_escapes) {
  char *s = capture(CTRAIN_LOG_DEBUG, CTRAIN_LOG_JSON, CTRAIN_LOG_INFO, "a \"q\"\\\n\x01");
  ASSERT_STR_CONTAINS(s, "\"level\":\"info\"");
  ASSERT_STR_CONTAINS(s, "\"component\":\"unit\"");
  ASSERT_STR_CONTAINS(s, "\"msg\":\"a \\\"q\\\"\\\\\\n\\u0001\"}\n");
  free(s);
}

/* Foreign text (log injection) with a newline, CR, ESC, DEL and a C1
 * control in a text line stays on its one line, escaped. */
TEST(text_lines_escape_control_bytes) {
  char *s = capture(CTRAIN_LOG_DEBUG, CTRAIN_LOG_TEXT, CTRAIN_LOG_WARN,
                    "s3: 403 fine\n2024-01-01T00:00:00.000Z error ctrain: forged\r\x1b[31mred"
                    "\x7f\x01\tz \xc2\x9b \xc3\xa9");
  ASSERT_STR_CONTAINS(s, "unit: s3: 403 fine\\n2024-01-01T00:00:00.000Z error ctrain: "
                         "forged\\r\\x1b[31mred\\x7f\\x01\\tz \\xc2\\x9b \xc3\xa9\n");
  ASSERT_EQ(strcspn(s, "\n") + 1, strlen(s)); /* one line */
  ASSERT_NULL(strchr(s, '\x1b'));
  ASSERT_NULL(strchr(s, '\r'));
  free(s);
  s = capture(CTRAIN_LOG_DEBUG, CTRAIN_LOG_JSON, CTRAIN_LOG_WARN,
              "a\x7f\x1b\xc2\x85"
              "b");
  ASSERT_STR_CONTAINS(s, "\"msg\":\"a\\u007f\\u001b\\u0085b\"}\n");
  free(s);
  /* A message that fills the buffer with control bytes is escaped whole. */
  char big[4096];
  memset(big, '\x1b', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  s = capture(CTRAIN_LOG_DEBUG, CTRAIN_LOG_TEXT, CTRAIN_LOG_WARN, big);
  ASSERT_NULL(strchr(s, '\x1b'));
  ASSERT_STR_CONTAINS(s, "\\x1b\\x1b\n");
  free(s);
}

TEST(level_parse) {
  ASSERT_EQ(ctrain_log_level_parse("debug"), CTRAIN_LOG_DEBUG);
  ASSERT_EQ(ctrain_log_level_parse("WARN"), CTRAIN_LOG_WARN);
  ASSERT_EQ(ctrain_log_level_parse("warning"), CTRAIN_LOG_WARN);
  ASSERT_EQ(ctrain_log_level_parse("loud"), -1);
  ASSERT_EQ(ctrain_log_level_parse(NULL), -1);
}

/* The --log-level parser both binaries share: the argument kept as given. */
TEST(level_flag) {
  const char *level = "info";
  ASSERT_EQ(ctrain_log_level_flag("Warning", &level), 0);
  ASSERT_STR_EQ(level, "Warning");
  ASSERT_EQ(ctrain_log_level_flag("loud", &level), -1);
  ASSERT_STR_EQ(level, "Warning");
}

TEST_MAIN(T(level_filter), T(json_escapes), T(text_lines_escape_control_bytes), T(level_parse),
          T(level_flag))
