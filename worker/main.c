/* main.c - ctrain-worker entry point: flags, logging, then the command. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "worker/evaluate.h"
#include "ctrain/log.h"
#include "worker/train.h"
#include "ctrain/version.h"
#include "worker/cpubudget.h"
#include "worker/options.h"

int main(int argc, char **argv) {
  wk_options opts;
  char err[1024] = "";
  if (wk_options_parse(&opts, argc, argv, err, sizeof(err))) {
    fprintf(stderr, "ctrain-worker: %s\nTry 'ctrain-worker --help'.\n", err);
    return CTRAIN_EXIT_USAGE;
  }
  if (opts.show_help) {
    wk_options_usage(stdout);
    return 0;
  }
  if (opts.show_version) {
    printf("ctrain-worker %s\n", CTRAIN_VERSION);
    return 0;
  }
  ctrain_log_init("ctrain-worker", (ctrain_log_level)ctrain_log_level_parse(opts.log_level),
                  CTRAIN_LOG_TEXT);
  /* A file-size limit must fail the write (EFBIG, reported as disk full with
   * the backup named), not kill the worker. */
  signal(SIGXFSZ, SIG_IGN);
  cpubudget_blas_kernels(argv);
  /* Once, before any thread: the object-store backups (--backup-uri) use curl. */
  if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
    LOG_ERROR("curl_global_init failed (exit %d)", CTRAIN_EXIT_SOFTWARE);
    return CTRAIN_EXIT_SOFTWARE;
  }
  if (!strcmp(opts.command, "evaluate")) {
    eval_result er;
    ctrain_err r = eval_run(&opts, &er, err, sizeof(err));
    if (r) {
      int code = ctrain_exit_for_err(r);
      LOG_ERROR("%s (exit %d)", err[0] ? err : ctrain_strerror(r), code);
      return code;
    }
    LOG_INFO("test accuracy: %.4f (loss %.4f) on %zu samples", er.accuracy, er.loss, er.samples);
    printf("{\"samples\":%zu,\"loss\":%.6f,\"accuracy\":%.6f}\n", er.samples, er.loss, er.accuracy);
    return CTRAIN_EXIT_OK;
  }
  ctrain_err result = train_run(&opts, err, sizeof(err));
  if (result) {
    int code = ctrain_exit_for_err(result);
    LOG_ERROR("%s (exit %d)", err[0] ? err : ctrain_strerror(result), code);
    return code;
  }
  return CTRAIN_EXIT_OK;
}
