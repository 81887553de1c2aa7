/* flags.c - table-driven flag parsing; see ctrain/flags.h. */
#include "ctrain/flags.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/util.h"

static const ctrain_flag *find(const ctrain_flag *flags, const char *name, size_t len) {
  for (const ctrain_flag *f = flags; f->name; f++)
    if (strlen(f->name) == len && !strncmp(f->name, name, len))
      return f;
  return NULL;
}

static int in_range(const ctrain_flag *f, double v) {
  if (f->min == 0 && f->max == 0)
    return 1;
  if (v < f->min || v > f->max)
    return 0;
  if ((f->excl & CTRAIN_FLAG_EXCL_MIN) && v == f->min)
    return 0;
  if ((f->excl & CTRAIN_FLAG_EXCL_MAX) && v == f->max)
    return 0;
  return 1;
}

/* "a, b or c" into out. */
static void choice_list(const char *const *c, char *out, size_t len) {
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; c && c[i]; i++) {
    const char *sep = i == 0 ? "" : c[i + 1] ? ", " : " or ";
    int w = snprintf(out + n, len - n, "%s%s", sep, c[i]);
    if (w < 0 || (size_t)w >= len - n)
      return;
    n += (size_t)w;
  }
}

/* 0 and the value stored, or -1 and the expectation in `expect`. */
static int store(const ctrain_flag *f, const char *arg, char *expect, size_t elen) {
  char *end = NULL;
  errno = 0;
  switch (f->kind) {
  case CTRAIN_FLAG_STRING:
    *(const char **)f->dst = arg;
    return 0;
  case CTRAIN_FLAG_INT: {
    long v = strtol(arg, &end, 10);
    int ok =
        !errno && end != arg && !*end && v >= INT_MIN && v <= INT_MAX && in_range(f, (double)v);
    if (f->min == 0 && f->max == 0)
      snprintf(expect, elen, "an integer");
    else
      snprintf(expect, elen, "an integer in %.0f..%.0f", f->min, f->max);
    if (ok)
      *(int *)f->dst = (int)v;
    return ok ? 0 : -1;
  }
  case CTRAIN_FLAG_DOUBLE: {
    double v = strtod(arg, &end);
    int ok = !errno && end != arg && !*end && isfinite(v) && in_range(f, v);
    snprintf(expect, elen, "a number in %c%g, %g%c", (f->excl & CTRAIN_FLAG_EXCL_MIN) ? '(' : '[',
             f->min, f->max, (f->excl & CTRAIN_FLAG_EXCL_MAX) ? ')' : ']');
    if (ok)
      *(double *)f->dst = v;
    return ok ? 0 : -1;
  }
  case CTRAIN_FLAG_U64: {
    unsigned long long v = strtoull(arg, &end, 10);
    int ok = !errno && end != arg && !*end && arg[0] != '-' && arg[0] != '+';
    snprintf(expect, elen, "a non-negative integer");
    if (ok)
      *(uint64_t *)f->dst = (uint64_t)v;
    return ok ? 0 : -1;
  }
  case CTRAIN_FLAG_SET:
    *(int *)f->dst = 1;
    return 0;
  case CTRAIN_FLAG_BOOL:
    snprintf(expect, elen, "true or false");
    if (!arg || !strcmp(arg, "true") || !strcmp(arg, "1")) {
      *(int *)f->dst = 1;
      return 0;
    }
    if (!strcmp(arg, "false") || !strcmp(arg, "0")) {
      *(int *)f->dst = 0;
      return 0;
    }
    return -1;
  case CTRAIN_FLAG_CHOICE:
  case CTRAIN_FLAG_CHOICE_STR:
    choice_list(f->choices, expect, elen);
    for (int i = 0; f->choices && f->choices[i]; i++) {
      if (strcmp(arg, f->choices[i]))
        continue;
      if (f->kind == CTRAIN_FLAG_CHOICE_STR)
        *(const char **)f->dst = f->choices[i];
      else
        *(int *)f->dst = f->values ? f->values[i] : i;
      return 0;
    }
    return -1;
  case CTRAIN_FLAG_FUNC:
    snprintf(expect, elen, "valid");
    return f->parse(arg, f->dst);
  }
  return -1;
}

ctrain_err ctrain_flags_parse(const ctrain_flag *flags, int argc, char **argv, int *help,
                              char **pos, int *npos, char *errbuf, size_t errlen) {
  int only_pos = 0;
  *npos = 0;
  if (help)
    *help = 0;
  for (int i = 1; i < argc; i++) {
    char *a = argv[i];
    if (only_pos || a[0] != '-' || !a[1]) {
      pos[(*npos)++] = a;
      continue;
    }
    if (!strcmp(a, "--")) {
      only_pos = 1;
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      if (help)
        *help = 1;
      continue;
    }
    if (a[1] != '-')
      return ctrain_errf(CTRAIN_E_INVAL, errbuf, errlen, "%s: unknown flag", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    const ctrain_flag *f = find(flags, name, eq ? (size_t)(eq - name) : strlen(name));
    if (!f)
      return ctrain_errf(CTRAIN_E_INVAL, errbuf, errlen, "%.*s: unknown flag",
                         (int)(eq ? eq - a : (long)strlen(a)), a);
    const char *arg = eq ? eq + 1 : NULL;
    if (f->kind == CTRAIN_FLAG_SET && arg)
      return ctrain_errf(CTRAIN_E_INVAL, errbuf, errlen, "--%s: takes no value", f->name);
    if (!arg && f->kind != CTRAIN_FLAG_SET && f->kind != CTRAIN_FLAG_BOOL) {
      if (i + 1 >= argc)
        return ctrain_errf(CTRAIN_E_INVAL, errbuf, errlen, "--%s: missing value", f->name);
      arg = argv[++i];
    }
    char expect[256];
    if (store(f, arg, expect, sizeof expect))
      return ctrain_errf(CTRAIN_E_INVAL, errbuf, errlen, "--%s: '%s' is not %s", f->name,
                         arg ? arg : "", f->expect ? f->expect : expect);
  }
  return CTRAIN_OK;
}

/* Writes `s` from column `col` (past the flag), wrapped to `width` with the
 * lines after the first indented to `indent`. */
static void usage_text(FILE *f, int col, int indent, int width, const char *s) {
  int fresh = 1; /* no word on this line yet past the flag */
  while (*s) {
    size_t n = strcspn(s, " \n");
    if (*s == ' ') {
      s++;
      continue;
    }
    if (*s == '\n' || (!fresh && col + 1 + (int)n > width)) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
      fresh = 1;
      s += *s == '\n';
      continue;
    }
    if (!fresh) {
      fputc(' ', f);
      col++;
    }
    fwrite(s, 1, n, f);
    col += (int)n;
    s += n;
    fresh = 0;
  }
  fputc('\n', f);
}

void ctrain_flags_usage_line(FILE *f, char short_name, const char *name, const char *metavar,
                             const char *help, int col, int width) {
  int at = short_name ? fprintf(f, "  -%c, --%s", short_name, name) : fprintf(f, "  --%s", name);
  if (metavar) /* "[=true|false]" follows the name */
    at += fprintf(f, metavar[0] == '[' ? "%s" : " %s", metavar);
  int pad = at + 2 <= col ? col - at : 2;
  fprintf(f, "%*s", pad, "");
  usage_text(f, at + pad, col, width, help ? help : "");
}
