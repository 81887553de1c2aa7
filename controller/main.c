/* main.c - ctrain-controller entry point. */
#include <signal.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "controller/controller.h"
#include "controller/options.h"
#include "controller/uninstall.h"
#include "ctrain/log.h"
#include "ctrain/version.h"

static void on_signal(int sig) {
  (void)sig;
  ctl_request_stop();
}

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
#ifdef __GLIBC__
  /* glibc gives each thread that allocates its own arena (up to 8 per
   * core), and memory freed in one is not reused by another: with ~30
   * threads (workers, create pool, informers, events) that inflates RSS
   * several times over what is live. Two arenas cost nothing measurable in
   * speed here; the allocations are small and short. */
  mallopt(M_ARENA_MAX, 2);
  /* A fixed mmap threshold: a buffer of 128 KiB or more (a list page, a
   * long watch line, a big response) is mapped and given back whole when
   * freed. glibc's default threshold grows with each such buffer freed, up
   * to 32 MiB, after which they are carved out of the heap and leave holes
   * that stay resident: at 6,400 pods the heap held 18.5 MiB free beside
   * 14.0 MiB in use (bench/scale.py, ctrain_heap_bytes). */
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
  ctrain_log_init("ctrain-controller", (ctrain_log_level)ctrain_log_level_parse(opts.log_level),
                  strcmp(opts.log_format, "json") ? CTRAIN_LOG_TEXT : CTRAIN_LOG_JSON);
  if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
    LOG_ERROR("curl_global_init failed");
    return CTRAIN_EXIT_SOFTWARE;
  }
  if (opts.release_finalizers) {
    /* A one-shot for uninstall, with the controller stopped (uninstall.h). */
    ctrain_err released = ctl_release_finalizers(&opts, stdout);
    curl_global_cleanup();
    return released ? 1 : 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  ctrain_err result = ctl_run(&opts);
  curl_global_cleanup();
  if (result == CTRAIN_E_INVAL || result == CTRAIN_E_CONFIG || result == CTRAIN_E_PARSE)
    return CTRAIN_EXIT_CONFIG;
  return result ? 1 : 0;
}
