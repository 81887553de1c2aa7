/* kube_time.c - Kubernetes' time formats; see ctrain/kube_time.h. */
#include "ctrain/kube_time.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

ctrain_err kube_time_format(int64_t t, char *buf, size_t len) {
  struct tm tm;
  time_t tt = (time_t)t;
  if (!gmtime_r(&tt, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    return CTRAIN_E_INVAL;
  return CTRAIN_OK;
}

ctrain_err kube_time_parse(const char *s, int64_t *t) {
  struct tm tm;
  memset(&tm, 0, sizeof(tm));
  if (!s)
    return CTRAIN_E_PARSE;
  const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (!p)
    return CTRAIN_E_PARSE;
  if (*p == '.') {
    p++;
    while (isdigit((unsigned char)*p))
      p++;
  }
  int64_t off = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if ((*p == '+' || *p == '-') && isdigit((unsigned char)p[1]) &&
             isdigit((unsigned char)p[2]) && p[3] == ':' && isdigit((unsigned char)p[4]) &&
             isdigit((unsigned char)p[5])) {
    off = ((p[1] - '0') * 10 + (p[2] - '0')) * 3600 + ((p[4] - '0') * 10 + (p[5] - '0')) * 60;
    if (*p == '-')
      off = -off;
    p += 6;
  } else {
    return CTRAIN_E_PARSE;
  }
  if (*p)
    return CTRAIN_E_PARSE;
  *t = (int64_t)timegm(&tm) - off;
  return CTRAIN_OK;
}

void kube_microtime_format(const struct timespec *ts, char *buf, size_t cap) {
  struct tm tm;
  gmtime_r(&ts->tv_sec, &tm);
  snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts->tv_nsec / 1000);
}
