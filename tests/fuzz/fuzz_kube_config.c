/* fuzz_kube_config.c - kubeconfig parsing from untrusted YAML (no files are
 * read: file references resolve under a directory that does not exist). */
#include <stdint.h>

#include "ctrain/kube_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kube_config *c = NULL;
  char err[256];
  if (kube_config_parse((const char *)data, size, "fuzz", "/nonexistent-fuzz-dir", NULL, &c, err,
                        sizeof(err)) == CTRAIN_OK) {
    char tok[128];
    /* Errors are expected of fuzzed input: the target looks for crashes. */
    ctrain_ignore(kube_config_token(c, tok, sizeof(tok), err, sizeof(err)));
  }
  kube_config_free(c);
  c = NULL;
  if (kube_config_parse((const char *)data, size, "fuzz", "/nonexistent-fuzz-dir", "other", &c, err,
                        sizeof(err)) == CTRAIN_OK)
    kube_config_free(c);
  return 0;
}
