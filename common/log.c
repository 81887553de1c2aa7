/* log.c - leveled text/JSON logging; see ctrain/log.h. */
#include "ctrain/log.h"

#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "ctrain/util.h"

static const char *log_component = "ctrain";
static ctrain_log_level log_level = CTRAIN_LOG_INFO;
static ctrain_log_format log_format = CTRAIN_LOG_TEXT;
static FILE *log_stream = NULL;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void ctrain_log_init(const char *component, ctrain_log_level level, ctrain_log_format format) {
  if (component)
    log_component = component;
  log_level = level;
  log_format = format;
}

int ctrain_log_level_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (s && !strcasecmp(s, level_names[i]))
      return i;
  if (s && !strcasecmp(s, "warning"))
    return CTRAIN_LOG_WARN;
  return -1;
}

int ctrain_log_level_flag(const char *arg, void *dst) {
  if (ctrain_log_level_parse(arg) < 0)
    return -1;
  *(const char **)dst = arg;
  return 0;
}

void ctrain_log_set_stream(FILE *f) {
  log_stream = f;
}

/* Writes `s` as the body of a JSON string (without quotes). */
static void json_escape(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"':
      fputs("\\\"", f);
      break;
    case '\\':
      fputs("\\\\", f);
      break;
    case '\n':
      fputs("\\n", f);
      break;
    case '\r':
      fputs("\\r", f);
      break;
    case '\t':
      fputs("\\t", f);
      break;
    default:
      if (*p < 0x20 || *p == 0x7f)
        fprintf(f, "\\u%04x", *p);
      else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) /* a C1 control */
        fprintf(f, "\\u%04x", *++p);
      else
        fputc(*p, f);
    }
  }
}

void ctrain_log(ctrain_log_level level, const char *fmt, ...) {
  if (level < log_level)
    return;
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);

  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[96];
  snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);

  FILE *f = log_stream ? log_stream : stderr;
  flockfile(f);
  if (log_format == CTRAIN_LOG_JSON) {
    fprintf(f, "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"%s\",\"msg\":\"", when,
            level_names[level], log_component);
    json_escape(f, msg);
    fputs("\"}\n", f);
  } else {
    char esc[4 * sizeof(msg)]; /* the worst case: every byte \xNN */
    fprintf(f, "%s %-5s %s: %s\n", when, level_names[level], log_component,
            ctrain_escape_ctl(msg, esc, sizeof(esc)));
  }
  fflush(f);
  funlockfile(f);
}
