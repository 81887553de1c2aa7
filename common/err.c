/* err.c - names of ctrain_err values and the exit-code table. */
#include "ctrain/err.h"

static const char *const names[CTRAIN_E_LAST] = {
    [CTRAIN_OK] = "no error",
    [CTRAIN_E_NOMEM] = "out of memory",
    [CTRAIN_E_INVAL] = "invalid argument",
    [CTRAIN_E_IO] = "I/O error",
    [CTRAIN_E_NOSPACE] = "no space left (disk full or file size limit)",
    [CTRAIN_E_PARSE] = "parse error",
    [CTRAIN_E_CONFIG] = "invalid configuration",
    [CTRAIN_E_DATA] = "invalid data",
    [CTRAIN_E_CORRUPT] = "corrupt file (checksum or magic mismatch)",
    [CTRAIN_E_NET] = "network error",
    [CTRAIN_E_TIMEOUT] = "timed out",
    [CTRAIN_E_PEER] = "peer lost",
    [CTRAIN_E_AUTH] = "authentication failed",
    [CTRAIN_E_TLS] = "TLS verification failed",
    [CTRAIN_E_HTTP] = "unexpected HTTP status",
    [CTRAIN_E_CONFLICT] = "conflict",
    [CTRAIN_E_NOTFOUND] = "not found",
    [CTRAIN_E_GONE] = "gone (resource version too old)",
    [CTRAIN_E_CANCELLED] = "cancelled",
    [CTRAIN_E_TOOBIG] = "input too large",
    [CTRAIN_E_CUDA] = "CUDA error",
    [CTRAIN_E_NCCL] = "NCCL error",
    [CTRAIN_E_UNSUPPORTED] = "not supported in this build",
};

const char *ctrain_strerror(ctrain_err err) {
  if ((int)err < 0 || err >= CTRAIN_E_LAST || !names[err])
    return "unknown error";
  return names[err];
}

ctrain_exit_class ctrain_exit_classify(int code) {
  switch (code) {
  case CTRAIN_EXIT_OK:
    return CTRAIN_EXIT_CLASS_SUCCESS;
  case CTRAIN_EXIT_USAGE:
  case CTRAIN_EXIT_DATAERR:
  case CTRAIN_EXIT_CONFIG:
    return CTRAIN_EXIT_CLASS_PERMANENT;
  case CTRAIN_EXIT_TEMPFAIL:
    return CTRAIN_EXIT_CLASS_RETRYABLE;
  default:
    if (code > 128 && code < 256)
      return CTRAIN_EXIT_CLASS_RETRYABLE;
    return CTRAIN_EXIT_CLASS_OTHER;
  }
}

int ctrain_exit_for_err(ctrain_err err) {
  switch (err) {
  case CTRAIN_OK:
    return CTRAIN_EXIT_OK;
  case CTRAIN_E_INVAL:
    return CTRAIN_EXIT_USAGE;
  case CTRAIN_E_DATA:
    return CTRAIN_EXIT_DATAERR;
  case CTRAIN_E_PARSE:
  case CTRAIN_E_CONFIG:
    return CTRAIN_EXIT_CONFIG;
  case CTRAIN_E_IO:
  case CTRAIN_E_NOSPACE:
  case CTRAIN_E_NET:
  case CTRAIN_E_TIMEOUT:
  case CTRAIN_E_PEER:
  case CTRAIN_E_AUTH:
  case CTRAIN_E_NCCL:
  case CTRAIN_E_CANCELLED:
    return CTRAIN_EXIT_TEMPFAIL;
  default:
    return CTRAIN_EXIT_SOFTWARE;
  }
}
