/* ctrain/log.h - leveled logging to stderr, as text or JSON lines.
 *
 * One line per call, written with a single locked write so lines of several
 * threads never interleave. Secrets are never passed here: callers log a
 * token's presence, never its value. The formatted message is escaped
 * (a message may carry foreign text): in text lines by ctrain_escape_ctl (\n, \r, \t, \xNN for the
 * other control bytes, 0x7f and C1), in JSON lines as JSON escapes (\uNNNN
 * for every control byte, 0x7f and C1), so foreign text in a message (an
 * apiserver's or S3's message, a pod's answer) can neither split a line nor
 * reach a terminal as an escape sequence. A message is cut at 4095 bytes. */
#ifndef CTRAIN_LOG_H
#define CTRAIN_LOG_H

#include <stdio.h>

typedef enum {
  CTRAIN_LOG_DEBUG = 0,
  CTRAIN_LOG_INFO,
  CTRAIN_LOG_WARN,
  CTRAIN_LOG_ERROR
} ctrain_log_level;

typedef enum { CTRAIN_LOG_TEXT = 0, CTRAIN_LOG_JSON } ctrain_log_format;

/* Set once in main before threads start. `component` is borrowed and must
 * outlive all logging (a string literal). */
void ctrain_log_init(const char *component, ctrain_log_level level, ctrain_log_format format);

/* Parses "debug|info|warn|error" (any case; "warning" too); returns -1 for
 * anything else. */
int ctrain_log_level_parse(const char *s);

/* --log-level of both binaries: a ctrain_flag parse function (ctrain/flags.h,
 * CTRAIN_FLAG_FUNC) that accepts what ctrain_log_level_parse does and keeps
 * the argument as given in *(const char **)dst; -1, dst untouched, for
 * anything else. CTRAIN_LOG_LEVEL_EXPECT is the flag's `expect`, for
 * "--log-level: 'x' is not one of debug, info, warn, error". */
int ctrain_log_level_flag(const char *arg, void *dst);
#define CTRAIN_LOG_LEVEL_EXPECT "one of debug, info, warn, error"

/* Redirects output (tests). NULL restores stderr. The stream is borrowed. */
void ctrain_log_set_stream(FILE *f);

void ctrain_log(ctrain_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_DEBUG(...) ctrain_log(CTRAIN_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...)  ctrain_log(CTRAIN_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...)  ctrain_log(CTRAIN_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) ctrain_log(CTRAIN_LOG_ERROR, __VA_ARGS__)

#endif
