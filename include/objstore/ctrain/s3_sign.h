/* ctrain/s3_sign.h - AWS Signature Version 4 for S3 requests.
 *
 * Pure functions (OpenSSL HMAC/SHA-256, no I/O), so they are checked against
 * AWS's published examples byte for byte. The caller builds the request
 * parts already in wire form: the path percent-encoded as S3 wants it (every
 * byte but unreserved ones and '/', never normalised: S3 keys may hold "//"
 * or "."), the query as name=value pairs whose names and values are encoded
 * with s3_uri_encode. The secret key is only ever fed to HMAC: nothing here
 * formats it. */
#ifndef CTRAIN_S3_SIGN_H
#define CTRAIN_S3_SIGN_H

#include <stddef.h>

#include "ctrain/buf.h"
#include "ctrain/err.h"

/* Hex SHA-256 of the empty string: the payload hash of a request without a body. */
#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* x-amz-content-sha256 of a body that is streamed without being hashed first. */
#define S3_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
/* An unsigned aws-chunked body whose checksum travels in its trailer. */
#define S3_STREAMING_TRAILER "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

typedef struct s3_header {
  const char *name;  /* any case; signed in lower case */
  const char *value; /* trimmed and inner runs of spaces folded when signed */
} s3_header;

typedef struct s3_sign_input {
  const char *method;        /* "GET", "PUT", ... */
  const char *path;          /* encoded absolute path: "/bucket/a%24b" */
  const char *query;         /* "name=value&..." in any order, encoded; NULL or "" for none */
  const s3_header *headers;  /* every header to sign, host and x-amz-date included */
  size_t nheaders;           /* at most S3_SIGN_MAX_HEADERS */
  const char *payload_hash;  /* lower-case hex SHA-256 or S3_UNSIGNED_PAYLOAD */
  const char *amz_date;      /* "YYYYMMDDTHHMMSSZ" (UTC); its first 8 bytes are the scope date */
  const char *region;        /* "us-east-1" */
  const char *service;       /* "s3" */
  const char *access_key_id; /* appears in the Credential= part */
  const char *secret_key;    /* only used as HMAC key */
} s3_sign_input;

#define S3_SIGN_MAX_HEADERS 32

/* Signs `in`. On success *authz holds the Authorization header value
 * ("AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=<64 hex>");
 * `canonical` and `string_to_sign`, when not NULL, receive those
 * intermediate texts (tests compare them with AWS's). The buffers are the
 * caller's and are cleared first. CTRAIN_E_INVAL on a missing field, a bad
 * amz_date or too many headers; NOMEM/TOOBIG from the buffers. */
CTRAIN_NODISCARD ctrain_err s3_sign(const s3_sign_input *in, ctrain_buf *authz,
                                    ctrain_buf *canonical, ctrain_buf *string_to_sign);

/* Appends the S3 URI encoding of n bytes of s to out: unreserved bytes
 * (A-Z a-z 0-9 - . _ ~) as they are, '/' as it is when keep_slash (object key
 * paths), every other byte as %XX (upper-case hex). */
CTRAIN_NODISCARD ctrain_err s3_uri_encode(ctrain_buf *out, const char *s, size_t n, int keep_slash);

/* Lower-case hex of 32 bytes into hex (65 bytes, NUL-terminated). */
void s3_hex32(const unsigned char bin[32], char hex[65]);

/* Formats a UTC time as "YYYYMMDDTHHMMSSZ" (17 bytes with the NUL). */
void s3_amz_date(long long unix_s, char out[17]);

#endif
