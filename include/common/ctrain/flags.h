/* ctrain/flags.h - table-driven command-line flags, shared by the programs.
 *
 * A program lists its flags once, with where each value goes and what it may
 * be; ctrain_flags_parse checks every value and names the flag in the error:
 *
 *   static const char *const formats[] = {"text", "json", NULL};
 *   ctrain_flag flags[] = {
 *       {.name = "workers", .kind = CTRAIN_FLAG_INT, .dst = &o->workers, .min = 1, .max = 256},
 *       {.name = "log-format", .kind = CTRAIN_FLAG_CHOICE_STR, .dst = &o->log_format, .choices =
 * formats},
 *       {.name = NULL}};
 *
 * Syntax (GNU getopt_long's): `--name value`, `--name=value`; `--` ends the
 * flags; -h and --help set *help; anything else not starting with '-' is a
 * positional argument (in order, flags may come before or after). No global
 * state: safe to call again and from tests. Values of STRING flags are
 * borrowed from argv. */
#ifndef CTRAIN_FLAGS_H
#define CTRAIN_FLAGS_H

#include <stddef.h>
#include <stdio.h>

#include "ctrain/err.h"

typedef enum {
  CTRAIN_FLAG_STRING,     /* const char **: the argument */
  CTRAIN_FLAG_INT,        /* int *: a whole decimal in [min, max] */
  CTRAIN_FLAG_DOUBLE,     /* double *: a finite number in [min, max] */
  CTRAIN_FLAG_U64,        /* uint64_t *: a non-negative whole decimal */
  CTRAIN_FLAG_SET,        /* int *: takes no value, sets 1 */
  CTRAIN_FLAG_BOOL,       /* int *: bare sets 1; =true|false|1|0 */
  CTRAIN_FLAG_CHOICE,     /* int *: values[i] (or i) for the i-th of choices */
  CTRAIN_FLAG_CHOICE_STR, /* const char **: the matching entry of choices */
  CTRAIN_FLAG_FUNC,       /* parse(arg, dst, ...) decides */
} ctrain_flag_kind;

#define CTRAIN_FLAG_EXCL_MIN 1 /* INT, DOUBLE: min itself is out of range */
#define CTRAIN_FLAG_EXCL_MAX 2 /* INT, DOUBLE: max itself is out of range */

typedef struct ctrain_flag {
  const char *name; /* without the leading "--"; NULL ends the table */
  ctrain_flag_kind kind;
  void *dst;
  double min, max;            /* INT, DOUBLE: the range (INT: both 0 means the whole int range) */
  int excl;                   /* CTRAIN_FLAG_EXCL_* */
  const char *const *choices; /* CHOICE, CHOICE_STR: NULL-terminated */
  const int *values;          /* CHOICE: the value of each choice (NULL: its index) */
  /* What a good value is, for "--name: 'arg' is not <expect>"; NULL: from the kind. */
  const char *expect;
  /* FUNC: 0 when arg is good (and stored through dst), -1 when not. */
  int (*parse)(const char *arg, void *dst);
  /* --help: the value's name ("FILE"; NULL: none) and what the flag does
   * (ctrain_flags_usage_line; NULL: the flag is not listed). */
  const char *metavar, *help;
} ctrain_flag;

/* Parses argv[1..argc-1]. Positional arguments go to pos[0..*npos-1] (pos has
 * room for argc entries; borrowed from argv). On a bad flag or value:
 * CTRAIN_E_INVAL with a message naming the flag ("--workers: 'x' is not an
 * integer in 1..256", "--foo: unknown flag", "--data: missing value"); what
 * was parsed before it may already be stored. */
CTRAIN_NODISCARD ctrain_err ctrain_flags_parse(const ctrain_flag *flags, int argc, char **argv,
                                               int *help, char **pos, int *npos, char *errbuf,
                                               size_t errlen);

/* One flag's --help line: "  [-s, ]--name[ METAVAR]" (short_name 0: none;
 * a metavar that starts with '[', such as "[=true|false]", follows the name),
 * padded to column `col` (at least two spaces), then `help` wrapped to
 * `width` columns, its next lines indented to `col`; a '\n' in `help` starts
 * a new line. */
void ctrain_flags_usage_line(FILE *f, char short_name, const char *name, const char *metavar,
                             const char *help, int col, int width);

#endif
