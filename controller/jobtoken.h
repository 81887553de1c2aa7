/* controller/jobtoken.h - each job attempt's token, derived from one key.
 *
 * The controller keeps one key in a Secret of its own namespace
 * (JOBTOKEN_KEY_SECRET, key JOBTOKEN_KEY_FIELD) and derives the token of
 * attempt N of job uid U as hex(HMAC-SHA256(key, "U/N")). The token is a
 * function of what the controller already knows, so it never reads a
 * Secret in a job's namespace: it only creates `<job>-token-<N>-<tag>` there,
 * and after a restart it derives the same token again. A new attempt gets
 * a new token; a new key changes the tokens of attempts created after it
 * (pods already running keep the token they were started with). */
#ifndef CTRAIN_CTL_JOBTOKEN_H
#define CTRAIN_CTL_JOBTOKEN_H

#include <stddef.h>

#include "ctrain/err.h"
#include "ctrain/kube_client.h"

#define JOBTOKEN_KEY_SECRET "ctrain-controller-key" /* default name of the key Secret */
#define JOBTOKEN_KEY_FIELD  "key"                   /* its data key */
#define JOBTOKEN_KEY_BYTES  32                      /* a key the controller makes */
#define JOBTOKEN_KEY_MIN    32                      /* shortest key accepted */
#define JOBTOKEN_KEY_MAX    256                     /* longest key accepted */
#define JOBTOKEN_HEX_SIZE   65                      /* hex of SHA-256 + NUL */

typedef struct {
  unsigned char key[JOBTOKEN_KEY_MAX];
  size_t len;
} jobtoken_key;

/* Writes hex(HMAC-SHA256(key, uid "/" attempt)) into hex (NUL-terminated,
 * len >= JOBTOKEN_HEX_SIZE). CTRAIN_E_INVAL for a missing key or uid, an
 * attempt < 1 or a short buffer. */
CTRAIN_NODISCARD ctrain_err jobtoken_derive(const jobtoken_key *k, const char *uid, int attempt,
                                            char *hex, size_t len);

#define JOBTOKEN_TAG_SIZE 11 /* jobtoken_name_tag: 10 hex digits + NUL */

/* Writes the name tag of job `uid` (recon_input.name_tag): the first 10 hex
 * digits of HMAC-SHA256(key, "name-tag/" uid). No one without the key can
 * tell a job's tag before its pods name its Secret and ConfigMap, so
 * nothing can be made under those names first. CTRAIN_E_INVAL as
 * jobtoken_derive (len >= JOBTOKEN_TAG_SIZE). */
CTRAIN_NODISCARD ctrain_err jobtoken_name_tag(const jobtoken_key *k, const char *uid, char *tag,
                                              size_t len);

/* recon_token_fn over jobtoken_derive; ctx is a const jobtoken_key *. */
CTRAIN_NODISCARD ctrain_err jobtoken_fn(void *ctx, const char *uid, int attempt, char *hex,
                                        size_t len);

/* Decodes the key Secret `secret` (borrowed; data.key, base64): CTRAIN_E_CONFIG
 * with the reason in err when the field is missing, not base64, or shorter
 * than JOBTOKEN_KEY_MIN or longer than JOBTOKEN_KEY_MAX bytes. */
CTRAIN_NODISCARD ctrain_err jobtoken_key_from_secret(const cJSON *secret, jobtoken_key *k,
                                                     char *err, size_t errlen);

/* Builds the key Secret `name` in `ns` holding JOBTOKEN_KEY_BYTES random
 * bytes (hex, which is the key). *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err jobtoken_key_secret(const char *ns, const char *name, cJSON **out);

/* The key: creates Secret `ns`/`name` with a new random key, or, when it
 * exists (another replica or an earlier run made it, or an administrator),
 * reads it. Needs create and get on that Secret only. err says which call
 * failed and the apiserver's Status. */
CTRAIN_NODISCARD ctrain_err jobtoken_key_load(kube_client *c, const char *ns, const char *name,
                                              jobtoken_key *k, char *err, size_t errlen);

#endif
