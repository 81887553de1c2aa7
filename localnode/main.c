/* main.c - ctrain-localnode entry point. */
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ctrain/exitcode.h"
#include "ctrain/lnode_agent.h"
#include "ctrain/lnode_options.h"
#include "ctrain/log.h"

static volatile int g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

int main(int argc, char **argv) {
  lnode_options o;
  char err[1024] = "";
  if (lnode_options_parse(&o, argc, argv, err, sizeof(err))) {
    fprintf(stderr, "ctrain-localnode: %s\nTry 'ctrain-localnode --help'.\n", err);
    return CTRAIN_EXIT_USAGE;
  }
  if (o.show_help) {
    lnode_options_usage(stdout);
    return 0;
  }
  if (o.show_version) {
    printf("ctrain-localnode %s\n", CTRAIN_VERSION);
    return 0;
  }
  ctrain_log_init("ctrain-localnode", (ctrain_log_level)ctrain_log_level_parse(o.log_level),
                  strcmp(o.log_format, "json") ? CTRAIN_LOG_TEXT : CTRAIN_LOG_JSON);
  if (lnode_agent_preflight(err, sizeof(err))) {
    fprintf(stderr, "ctrain-localnode: %s\n", err);
    return CTRAIN_EXIT_CONFIG;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  int rc = 0;
  if (lnode_agent_run(&o, &g_stop, err, sizeof(err))) {
    LOG_ERROR("%s", err);
    rc = CTRAIN_EXIT_SOFTWARE;
  }
  curl_global_cleanup();
  return rc;
}
