/* contract.c - what both sides of the controller-worker contract compute;
 * see ctrain/contract.h. */
#include "ctrain/contract.h"

#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

void ctrain_progress_read_token(const char *job_token, char out[CTRAIN_PROGRESS_TOKEN_HEX + 1]) {
  unsigned char mac[32];
  unsigned int mlen = 0;
  static const char hex[] = "0123456789abcdef";
  HMAC(EVP_sha256(), job_token, (int)strlen(job_token),
       (const unsigned char *)CTRAIN_PROGRESS_READ_LABEL, strlen(CTRAIN_PROGRESS_READ_LABEL), mac,
       &mlen);
  for (unsigned i = 0; i < 32; i++) {
    out[2 * i] = hex[mac[i] >> 4];
    out[2 * i + 1] = hex[mac[i] & 15];
  }
  out[CTRAIN_PROGRESS_TOKEN_HEX] = '\0';
}
