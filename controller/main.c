/* main.c - ctrain-controller entry point. */
#include <stdio.h>
#include <string.h>

#include "ctrain/ctl_options.h"
#include "ctrain/exitcode.h"
#include "ctrain/log.h"
#include "ctrain/version.h"

int main(int argc, char **argv) {
  ctl_options opts;
  char err[256] = "";
  if (ctl_options_parse(&opts, argc, argv, err, sizeof(err))) {
    fprintf(stderr, "ctrain-controller: %s\nTry 'ctrain-controller --help'.\n", err);
    return CTRAIN_EXIT_USAGE;
  }
  if (opts.show_help) {
    ctl_options_usage(stdout);
    return 0;
  }
  if (opts.show_version) {
    printf("ctrain-controller %s\n", CTRAIN_VERSION);
    return 0;
  }
  ctrain_log_init("ctrain-controller", (ctrain_log_level)ctrain_log_level_parse(opts.log_level),
                  strcmp(opts.log_format, "json") ? CTRAIN_LOG_TEXT : CTRAIN_LOG_JSON);
  /* The reconciler lands with the controller issue; until then the binary
   * refuses to pretend it runs a control loop. */
  LOG_ERROR("the TrainingJob reconciler is not built yet (issue 4); nothing to run");
  return CTRAIN_EXIT_SOFTWARE;
}
