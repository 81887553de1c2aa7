/* ctrain/err.h - the one result type of every ctrain library.
 *
 * Functions return ctrain_err; 0 is success. The local holding it is named
 * `result` and is checked with `if(result) goto out;` (curl's CURLcode habit).
 * Details (the peer, the file, the apiserver's Status) go into the caller's
 * error buffer where an API takes one, never into a global. */
#ifndef CTRAIN_ERR_H
#define CTRAIN_ERR_H

#include <stdio.h>

typedef enum {
  CTRAIN_OK = 0,
  CTRAIN_E_NOMEM,     /* allocation failed */
  CTRAIN_E_INVAL,     /* bad argument or flag */
  CTRAIN_E_IO,        /* read/write/open failed */
  CTRAIN_E_NOSPACE,   /* disk full or file size limit */
  CTRAIN_E_PARSE,     /* malformed JSON/YAML/IDX */
  CTRAIN_E_CONFIG,    /* a config that parses but cannot be used */
  CTRAIN_E_DATA,      /* bad training data */
  CTRAIN_E_CORRUPT,   /* checksum or magic mismatch */
  CTRAIN_E_NET,       /* resolve/connect/socket error */
  CTRAIN_E_TIMEOUT,   /* a deadline passed */
  CTRAIN_E_PEER,      /* a peer was lost or misbehaved */
  CTRAIN_E_AUTH,      /* authentication refused (either side) */
  CTRAIN_E_TLS,       /* certificate did not verify */
  CTRAIN_E_HTTP,      /* an HTTP status the caller did not expect */
  CTRAIN_E_CONFLICT,  /* HTTP 409 */
  CTRAIN_E_NOTFOUND,  /* HTTP 404 or a missing object */
  CTRAIN_E_GONE,      /* HTTP 410: resourceVersion too old */
  CTRAIN_E_CANCELLED, /* stopped on request */
  CTRAIN_E_TOOBIG,    /* input over its cap */
  CTRAIN_E_CUDA,      /* CUDA runtime or cuBLAS error */
  CTRAIN_E_NCCL,      /* NCCL error */
  CTRAIN_E_UNSUPPORTED,
  CTRAIN_E_LAST /* not an error: number of codes */
} ctrain_err;

/* On every function that returns a ctrain_err: dropping the result is a
 * compile warning (an error under -Werror), as curl's CURLcode and Redis's
 * int returns are checked by convention; ours by the compiler. Where
 * ignoring it is the point, ctrain_ignore(f(...)) says so (GCC does not let
 * a (void) cast silence warn_unused_result), with the reason beside. */
#define CTRAIN_NODISCARD __attribute__((warn_unused_result))

static inline void ctrain_ignore(ctrain_err err) {
  (void)err;
}

/* Formats a message into the function's `errbuf` (of `errlen` bytes), sets
 * its `result` to `code` and jumps to its `out` label: the error path of a
 * function in the house style (`ctrain_err result; ... out:`). */
#define CTRAIN_FAIL(code, ...)                                                                     \
  do {                                                                                             \
    if (errbuf && errlen)                                                                          \
      snprintf(errbuf, errlen, __VA_ARGS__);                                                       \
    result = (code);                                                                               \
    goto out;                                                                                      \
  } while (0)

/* Static, never NULL, for any value (unknown ones included). */
const char *ctrain_strerror(ctrain_err err);

/* The worker's exit codes (docs/design.md "Gang restart").
 *
 * The controller decides restarts from these: the permanent ones are never
 * retried, 75 is retryable, 128+n is a signal (retryable). */
#define CTRAIN_EXIT_OK       0
#define CTRAIN_EXIT_SOFTWARE 70 /* internal error (sysexits EX_SOFTWARE) */
#define CTRAIN_EXIT_USAGE    64 /* bad flag: permanent */
#define CTRAIN_EXIT_DATAERR  65 /* bad data file: permanent */
#define CTRAIN_EXIT_TEMPFAIL 75 /* peer lost, timeout, preempted: retryable */
#define CTRAIN_EXIT_CONFIG   78 /* bad TF_CONFIG/model config/checkpoint config: permanent */

typedef enum {
  CTRAIN_EXIT_CLASS_SUCCESS,
  CTRAIN_EXIT_CLASS_PERMANENT,
  CTRAIN_EXIT_CLASS_RETRYABLE,
  CTRAIN_EXIT_CLASS_OTHER /* any other non-zero code: retried only by OnFailure */
} ctrain_exit_class;

/* Classifies a container exit code as docs/design.md's table does. */
ctrain_exit_class ctrain_exit_classify(int code);

/* The exit code a worker uses for a failure of this kind. */
int ctrain_exit_for_err(ctrain_err err);

#endif
