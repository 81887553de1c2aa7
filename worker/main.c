/* main.c - ctrain-worker entry point. */
#include <stdio.h>

#include "ctrain/exitcode.h"
#include "ctrain/log.h"
#include "ctrain/version.h"
#include "ctrain/wk_options.h"

int main(int argc, char **argv) {
  wk_options opts;
  char err[256] = "";
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
  LOG_ERROR("training is not built yet (issue 5); nothing to run");
  return CTRAIN_EXIT_SOFTWARE;
}
