/* test_s3.c - the pure parts of the S3 client: SigV4 against AWS's published
 * examples (the SigV4 test suite's get-vanilla family, and the S3 API
 * reference's "Examples: Signature Calculations"), URI encoding, checkpoint
 * URIs and endpoints, the XML S3 answers with, error classification and
 * backoff; and s3_get_range against a scripted server on loopback (each
 * connection one canned answer: the wrong ranges, a 200 for a range, a body
 * longer than asked, 412, 416). The rest of the transport is covered by
 * test_s3_hostile.c and tests/integration/test_s3.py (a real server). */
#include "test.h"

#include <pthread.h>
#include <stdarg.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <curl/curl.h>

#include "ctrain/buf.h"
#include "ctrain/s3.h"
#include "ctrain/s3_proto.h"
#include "ctrain/s3_sign.h"

/* The SigV4 test suite's credentials, date and scope. */
#define SUITE_AK   "AKIDEXAMPLE"
#define SUITE_SK   "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_DATE "20150830T123600Z"
#define SUITE_CRED                                                                                 \
  "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "

/* The S3 reference's credentials and date. */
#define S3EX_AK   "AKIAIOSFODNN7EXAMPLE"
#define S3EX_SK   "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define S3EX_DATE "20130524T000000Z"
#define S3EX_CRED                                                                                  \
  "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "

static void sign_suite(const char *method, const char *query, const char *want_authz) {
  s3_header h[] = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", SUITE_DATE}};
  s3_sign_input in = {.method = method,
                      .path = "/",
                      .query = query,
                      .headers = h,
                      .nheaders = 2,
                      .payload_hash = S3_EMPTY_SHA256,
                      .amz_date = SUITE_DATE,
                      .region = "us-east-1",
                      .service = "service",
                      .access_key_id = SUITE_AK,
                      .secret_key = SUITE_SK};
  ctrain_buf authz;
  ctrain_buf_init(&authz, 0);
  ASSERT_OK(s3_sign(&in, &authz, NULL, NULL));
  ASSERT_STR_EQ(authz.p, want_authz);
  ctrain_buf_free(&authz);
}

TEST(sigv4_suite_get_vanilla) {
  s3_header h[] = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", SUITE_DATE}};
  s3_sign_input in = {.method = "GET",
                      .path = "/",
                      .headers = h,
                      .nheaders = 2,
                      .payload_hash = S3_EMPTY_SHA256,
                      .amz_date = SUITE_DATE,
                      .region = "us-east-1",
                      .service = "service",
                      .access_key_id = SUITE_AK,
                      .secret_key = SUITE_SK};
  ctrain_buf authz, creq, sts;
  ctrain_buf_init(&authz, 0);
  ctrain_buf_init(&creq, 0);
  ctrain_buf_init(&sts, 0);
  ASSERT_OK(s3_sign(&in, &authz, &creq, &sts));
  /* get-vanilla.creq, .sts and .authz */
  ASSERT_STR_EQ(creq.p, "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                        "host;x-amz-date\n" S3_EMPTY_SHA256);
  ASSERT_STR_EQ(sts.p,
                "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/"
                "aws4_request\nbb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  ASSERT_STR_EQ(authz.p, SUITE_CRED
                "SignedHeaders=host;x-amz-date, "
                "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  ctrain_buf_free(&authz);
  ctrain_buf_free(&creq);
  ctrain_buf_free(&sts);
}

TEST(sigv4_suite_query_and_post) {
  /* get-vanilla-query-order-key-case: the query is sorted before signing. */
  sign_suite("GET", "Param2=value2&Param1=value1",
             SUITE_CRED
             "SignedHeaders=host;x-amz-date, "
             "Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
  /* get-vanilla-empty-query-key */
  sign_suite("GET", "Param1=value1",
             SUITE_CRED
             "SignedHeaders=host;x-amz-date, "
             "Signature=a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb");
  /* post-vanilla */
  sign_suite("POST", NULL,
             SUITE_CRED
             "SignedHeaders=host;x-amz-date, "
             "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

/* The S3 API reference's examples: four requests on examplebucket. */
static void sign_s3(const char *method, const char *path, const char *query, const s3_header *h,
                    size_t nh, const char *payload, const char *want_sts_hash,
                    const char *want_authz) {
  s3_sign_input in = {.method = method,
                      .path = path,
                      .query = query,
                      .headers = h,
                      .nheaders = nh,
                      .payload_hash = payload,
                      .amz_date = S3EX_DATE,
                      .region = "us-east-1",
                      .service = "s3",
                      .access_key_id = S3EX_AK,
                      .secret_key = S3EX_SK};
  ctrain_buf authz, sts;
  ctrain_buf_init(&authz, 0);
  ctrain_buf_init(&sts, 0);
  ASSERT_OK(s3_sign(&in, &authz, NULL, &sts));
  if (want_sts_hash)
    ASSERT_STR_CONTAINS(sts.p, want_sts_hash);
  ASSERT_STR_EQ(authz.p, want_authz);
  ctrain_buf_free(&authz);
  ctrain_buf_free(&sts);
}

TEST(sigv4_s3_get_object) {
  s3_header h[] = {{"Host", "examplebucket.s3.amazonaws.com"},
                   {"Range", "bytes=0-9"},
                   {"x-amz-content-sha256", S3_EMPTY_SHA256},
                   {"x-amz-date", S3EX_DATE}};
  sign_s3("GET", "/test.txt", NULL, h, 4, S3_EMPTY_SHA256,
          "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
          S3EX_CRED "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                    "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(sigv4_s3_put_object) {
  /* The key "test$file.text" goes on the wire as /test%24file.text. */
  ctrain_buf path;
  ctrain_buf_init(&path, 0);
  ASSERT_OK(ctrain_buf_append(&path, "/", 1));
  ASSERT_OK(s3_uri_encode(&path, "test$file.text", 14, 1));
  ASSERT_STR_EQ(path.p, "/test%24file.text");
  const char *body_hash = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
  s3_header h[] = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                   {"Host", "examplebucket.s3.amazonaws.com"},
                   {"x-amz-content-sha256", body_hash},
                   {"x-amz-date", S3EX_DATE},
                   {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
  sign_s3("PUT", path.p, NULL, h, 5, body_hash,
          "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
          S3EX_CRED "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, "
                    "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
  ctrain_buf_free(&path);
}

TEST(sigv4_s3_bucket_requests) {
  s3_header h[] = {{"Host", "examplebucket.s3.amazonaws.com"},
                   {"x-amz-content-sha256", S3_EMPTY_SHA256},
                   {"x-amz-date", S3EX_DATE}};
  /* GET ?lifecycle: a name without a value is signed as "lifecycle=". */
  sign_s3("GET", "/", "lifecycle", h, 3, S3_EMPTY_SHA256, NULL,
          S3EX_CRED "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                    "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  /* GET ?max-keys=2&prefix=J (list objects), given in the other order. */
  sign_s3("GET", "/", "prefix=J&max-keys=2", h, 3, S3_EMPTY_SHA256, NULL,
          S3EX_CRED "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                    "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(sigv4_header_canonical_form) {
  /* Names fold to lower case and sort; values are trimmed and inner runs of
   * whitespace fold to one space (the suite's get-header-value-trim rule). */
  s3_header h[] = {{"X-Amz-Date", SUITE_DATE},
                   {"My-Header1", "  value1  "},
                   {"Host", "example.amazonaws.com"},
                   {"my-header2", "\"a   b   c\""}};
  s3_sign_input in = {.method = "GET",
                      .path = "/",
                      .headers = h,
                      .nheaders = 4,
                      .payload_hash = S3_UNSIGNED_PAYLOAD,
                      .amz_date = SUITE_DATE,
                      .region = "us-east-1",
                      .service = "service",
                      .access_key_id = SUITE_AK,
                      .secret_key = SUITE_SK};
  ctrain_buf authz, creq;
  ctrain_buf_init(&authz, 0);
  ctrain_buf_init(&creq, 0);
  ASSERT_OK(s3_sign(&in, &authz, &creq, NULL));
  ASSERT_STR_EQ(creq.p, "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\n"
                        "my-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\n"
                        "host;my-header1;my-header2;x-amz-date\nUNSIGNED-PAYLOAD");
  ASSERT_STR_CONTAINS(authz.p, "SignedHeaders=host;my-header1;my-header2;x-amz-date, ");
  /* The secret never appears in what is sent. */
  ASSERT(strstr(authz.p, SUITE_SK) == NULL);
  ASSERT(strstr(creq.p, SUITE_SK) == NULL);

  /* Bad input is refused, not signed. */
  in.amz_date = "2015-08-30";
  ASSERT_EQ(s3_sign(&in, &authz, NULL, NULL), CTRAIN_E_INVAL);
  in.amz_date = SUITE_DATE;
  in.secret_key = NULL;
  ASSERT_EQ(s3_sign(&in, &authz, NULL, NULL), CTRAIN_E_INVAL);
  ctrain_buf_free(&authz);
  ctrain_buf_free(&creq);
}

TEST(uri_encode) {
  ctrain_buf b;
  ctrain_buf_init(&b, 0);
  const char *s = "ckpt/epoch 3/a+b=c&d~e_f.g-h/\xc3\xa9";
  ASSERT_OK(s3_uri_encode(&b, s, strlen(s), 1));
  ASSERT_STR_EQ(b.p, "ckpt/epoch%203/a%2Bb%3Dc%26d~e_f.g-h/%C3%A9");
  ctrain_buf_clear(&b);
  ASSERT_OK(s3_uri_encode(&b, "a/b", 3, 0));
  ASSERT_STR_EQ(b.p, "a%2Fb");
  ctrain_buf_free(&b);

  char d[17];
  s3_amz_date(1440938160LL, d); /* 2015-08-30T12:36:00Z */
  ASSERT_STR_EQ(d, SUITE_DATE);
}

TEST(location_defaults) {
  s3_location l;
  char err[256];
  ASSERT_OK(s3_location_parse("s3://my-bucket/jobs/mnist/", NULL, NULL, &l, err, sizeof err));
  ASSERT_STR_EQ(l.scheme, "s3");
  ASSERT_STR_EQ(l.bucket, "my-bucket");
  ASSERT_STR_EQ(l.prefix, "jobs/mnist");
  ASSERT_STR_EQ(l.region, "us-east-1");
  ASSERT_STR_EQ(l.endpoint, "https://s3.us-east-1.amazonaws.com");
  ASSERT_EQ(l.path_style, 0);
  ASSERT_STR_EQ(l.host, "my-bucket.s3.us-east-1.amazonaws.com");

  ctrain_buf key, path;
  ctrain_buf_init(&key, 0);
  ctrain_buf_init(&path, 0);
  ASSERT_OK(s3_location_key(&l, "ckpt-00000003.bin", &key));
  ASSERT_STR_EQ(key.p, "jobs/mnist/ckpt-00000003.bin");
  ASSERT_OK(s3_location_path(&l, key.p, &path));
  ASSERT_STR_EQ(path.p, "/jobs/mnist/ckpt-00000003.bin");

  /* A dotted bucket on AWS goes path-style (the wildcard certificate). */
  ASSERT_OK(s3_location_parse("s3://a.b.c", NULL, "eu-west-1", &l, err, sizeof err));
  ASSERT_EQ(l.path_style, 1);
  ASSERT_STR_EQ(l.prefix, "");
  ASSERT_STR_EQ(l.host, "s3.eu-west-1.amazonaws.com");
  ctrain_buf_clear(&key);
  ASSERT_OK(s3_location_key(&l, "x", &key));
  ASSERT_STR_EQ(key.p, "x");
  ctrain_buf_clear(&path);
  ASSERT_OK(s3_location_path(&l, NULL, &path));
  ASSERT_STR_EQ(path.p, "/a.b.c/");

  /* gs:// is GCS's XML API, path-style, region "auto"; underscores allowed. */
  ASSERT_OK(s3_location_parse("gs://my_bucket/p", NULL, NULL, &l, err, sizeof err));
  ASSERT_STR_EQ(l.endpoint, S3_GCS_ENDPOINT);
  ASSERT_STR_EQ(l.host, "storage.googleapis.com");
  ASSERT_STR_EQ(l.region, "auto");
  ASSERT_EQ(l.path_style, 1);
  ctrain_buf_free(&key);
  ctrain_buf_free(&path);
}

TEST(location_endpoint_override) {
  s3_location l;
  char err[256];
  ASSERT_OK(s3_location_parse("s3://ckpt/a=b/", "http://127.0.0.1:9000/", "", &l, err, sizeof err));
  ASSERT_STR_EQ(l.endpoint, "http://127.0.0.1:9000");
  ASSERT_STR_EQ(l.host, "127.0.0.1:9000");
  ASSERT_STR_EQ(l.prefix, "a=b");
  ASSERT_EQ(l.path_style, 1);
  ctrain_buf path;
  ctrain_buf_init(&path, 0);
  ASSERT_OK(s3_location_path(&l, "a=b/x y", &path));
  ASSERT_STR_EQ(path.p, "/ckpt/a%3Db/x%20y");
  ctrain_buf_free(&path);
}

TEST(location_errors_name_the_problem) {
  s3_location l;
  char err[256];
  ASSERT_EQ(s3_location_parse("file:///backups", NULL, NULL, &l, err, sizeof err), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "scheme must be s3:// or gs://");
  ASSERT_EQ(s3_location_parse("s3://My_Bucket/x", NULL, NULL, &l, err, sizeof err),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "bad bucket name 'My_Bucket'");
  ASSERT_EQ(s3_location_parse("s3://ab", NULL, NULL, &l, err, sizeof err), CTRAIN_E_CONFIG);
  ASSERT_EQ(s3_location_parse("s3://-abc", NULL, NULL, &l, err, sizeof err), CTRAIN_E_CONFIG);
  ASSERT_EQ(s3_location_parse("s3://", NULL, NULL, &l, err, sizeof err), CTRAIN_E_CONFIG);
  ASSERT_EQ(s3_location_parse("s3://abc/x\ny", NULL, NULL, &l, err, sizeof err), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "control byte");
  ASSERT_EQ(s3_location_parse("s3://abc", "ftp://h", NULL, &l, err, sizeof err), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "endpoint 'ftp://h'");
  ASSERT_EQ(s3_location_parse("s3://abc", "https://h/base", NULL, &l, err, sizeof err),
            CTRAIN_E_CONFIG);
  ASSERT_EQ(s3_location_parse("s3://abc", "https://user:pw@h", NULL, &l, err, sizeof err),
            CTRAIN_E_CONFIG);
  ASSERT_EQ(s3_location_parse("s3://abc", NULL, "us-east-1/../x", &l, err, sizeof err),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "is not a region name");
}

TEST(xml_error_and_list) {
  const char *e = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchBucket</Code>"
                  "<Message>The specified bucket does not exist &amp; never did &#60;x&#x3e;"
                  "</Message><BucketName>nope</BucketName></Error>";
  char code[64], msg[256];
  ASSERT_EQ(s3_xml_text(e, strlen(e), "Code", NULL, code, sizeof code), 1);
  ASSERT_STR_EQ(code, "NoSuchBucket");
  ASSERT_EQ(s3_xml_text(e, strlen(e), "Message", NULL, msg, sizeof msg), 1);
  ASSERT_STR_EQ(msg, "The specified bucket does not exist & never did <x>");
  ASSERT_EQ(s3_xml_text(e, strlen(e), "Key", NULL, msg, sizeof msg), 0);
  ASSERT_EQ(s3_xml_text(e, strlen(e), "Message", NULL, msg, 8), -1); /* does not fit */

  const char *l = "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                  "<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount>"
                  "<IsTruncated>true</IsTruncated>"
                  "<Contents><Key>p/a&amp;b</Key><Size>12</Size></Contents>"
                  "<Contents><Key>p/c</Key><Size>0</Size></Contents>"
                  "<NextContinuationToken>1/x+y=</NextContinuationToken></ListBucketResult>";
  size_t pos = 0, n;
  const char *inner;
  char key[64];
  ASSERT_EQ(s3_xml_element(l, strlen(l), "Contents", &pos, &inner, &n), 1);
  ASSERT_EQ(s3_xml_text(inner, n, "Key", NULL, key, sizeof key), 1);
  ASSERT_STR_EQ(key, "p/a&b");
  ASSERT_EQ(s3_xml_text(inner, n, "Size", NULL, key, sizeof key), 1);
  ASSERT_STR_EQ(key, "12");
  ASSERT_EQ(s3_xml_element(l, strlen(l), "Contents", &pos, &inner, &n), 1);
  ASSERT_EQ(s3_xml_text(inner, n, "Key", NULL, key, sizeof key), 1);
  ASSERT_STR_EQ(key, "p/c");
  ASSERT_EQ(s3_xml_element(l, strlen(l), "Contents", &pos, &inner, &n), 0);
  ASSERT_EQ(s3_xml_text(l, strlen(l), "NextContinuationToken", NULL, key, sizeof key), 1);
  ASSERT_STR_EQ(key, "1/x+y=");
  /* An unclosed element and a bad entity are not text. */
  ASSERT_EQ(s3_xml_text("<Code>abc", 9, "Code", NULL, key, sizeof key), 0);
  ASSERT_EQ(s3_xml_text("<Code>a&bogus;</Code>", 21, "Code", NULL, key, sizeof key), -1);
}

TEST(classify_http) {
  s3_verdict v;
  v = s3_classify(200, "");
  ASSERT_EQ(v.err, CTRAIN_OK);
  v = s3_classify(204, NULL);
  ASSERT_EQ(v.err, CTRAIN_OK);
  /* Permanent: the worker exits 78 through ctrain_exit_for_err. */
  const char *perm[] = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                        "ExpiredToken"};
  for (size_t i = 0; i < sizeof(perm) / sizeof(perm[0]); i++) {
    v = s3_classify(403, perm[i]);
    ASSERT_EQ(v.err, CTRAIN_E_CONFIG);
    ASSERT_EQ(v.retryable, 0);
  }
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_CONFIG), CTRAIN_EXIT_CONFIG);
  v = s3_classify(404, "NoSuchBucket");
  ASSERT_EQ(v.err, CTRAIN_E_CONFIG);
  v = s3_classify(400, "AuthorizationHeaderMalformed");
  ASSERT_EQ(v.err, CTRAIN_E_CONFIG);
  v = s3_classify(301, "PermanentRedirect");
  ASSERT_EQ(v.err, CTRAIN_E_CONFIG);
  v = s3_classify(403, ""); /* HEAD: no body */
  ASSERT_EQ(v.err, CTRAIN_E_CONFIG);
  /* Missing objects are the caller's business. */
  v = s3_classify(404, "NoSuchKey");
  ASSERT_EQ(v.err, CTRAIN_E_NOTFOUND);
  ASSERT_EQ(v.retryable, 0);
  v = s3_classify(404, "");
  ASSERT_EQ(v.err, CTRAIN_E_NOTFOUND);
  v = s3_classify(404, "NoSuchUpload");
  ASSERT_EQ(v.err, CTRAIN_E_NOTFOUND);
  v = s3_classify(404, "XAdminUserNotFound"); /* versitygw's unknown access key */
  ASSERT_EQ(v.err, CTRAIN_E_CONFIG);
  /* Retryable: 5xx, throttling, request timeouts. */
  const long codes[] = {500, 502, 503, 504, 429};
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
    v = s3_classify(codes[i], "");
    ASSERT_EQ(v.err, CTRAIN_E_HTTP);
    ASSERT_EQ(v.retryable, 1);
  }
  v = s3_classify(503, "SlowDown");
  ASSERT_EQ(v.retryable, 1);
  v = s3_classify(400, "RequestTimeout");
  ASSERT_EQ(v.retryable, 1);
  v = s3_classify(400, "ThrottlingException");
  ASSERT_EQ(v.retryable, 1);
  v = s3_classify(400, "XAmzContentSHA256Mismatch");
  ASSERT_EQ(v.err, CTRAIN_E_CORRUPT);
  ASSERT_EQ(v.retryable, 1);
  v = s3_classify(409, "OperationAborted"); /* S3's "a conflicting operation, retry" */
  ASSERT_EQ(v.retryable, 1);
  v = s3_classify(400, "EntityTooSmall");
  ASSERT_EQ(v.err, CTRAIN_E_HTTP);
  ASSERT_EQ(v.retryable, 0);
}

TEST(classify_transport) {
  s3_verdict v = s3_classify_transport(CURLE_OPERATION_TIMEDOUT);
  ASSERT_EQ(v.err, CTRAIN_E_TIMEOUT);
  ASSERT_EQ(v.retryable, 1);
  v = s3_classify_transport(CURLE_COULDNT_CONNECT);
  ASSERT_EQ(v.err, CTRAIN_E_NET);
  ASSERT_EQ(v.retryable, 1);
  v = s3_classify_transport(CURLE_RECV_ERROR);
  ASSERT_EQ(v.retryable, 1);
  v = s3_classify_transport(CURLE_PEER_FAILED_VERIFICATION);
  ASSERT_EQ(v.err, CTRAIN_E_TLS);
  ASSERT_EQ(v.retryable, 0);
  v = s3_classify_transport(CURLE_WRITE_ERROR);
  ASSERT_EQ(v.err, CTRAIN_E_IO);
  ASSERT_EQ(v.retryable, 0);
}

TEST(backoff_grows_with_jitter_and_cap) {
  for (unsigned rnd = 0; rnd < 2000; rnd += 7) {
    for (int a = 1; a <= 12; a++) {
      long ceiling = 200L << (a - 1);
      if (ceiling > 5000)
        ceiling = 5000;
      long d = s3_backoff_ms(a, 200, 5000, 0, rnd * 2654435761u);
      ASSERT_GE(d, ceiling / 2);
      ASSERT_LE(d, ceiling);
    }
  }
  /* Retry-After wins when longer. */
  ASSERT_EQ(s3_backoff_ms(1, 200, 5000, 3000, 0), 3000);
  /* Different random values spread the delays. */
  ASSERT_NE(s3_backoff_ms(5, 200, 5000, 0, 1), s3_backoff_ms(5, 200, 5000, 0, 1234567));
}

/* --- s3_get_range against a scripted server ------------------------------- */

static const char OBJ[] = "0123456789abcdefghijklmnopqrstuvwxyz"; /* the object: 36 bytes */
#define OBJ_LEN 36
#define ETAG    "\"e1\""
#define NANS    6
#define H206    "HTTP/1.1 206 Partial Content\r\n"

/* Answers connection i with ans[i] (raw: status line, headers, body) and
 * keeps its request head in req[i]; after n connections it stops listening,
 * so a client asking more meets a refused connection. */
typedef struct script {
  int lfd, port, n, served;
  pthread_t th;
  char ans[NANS][1024];
  size_t ans_len[NANS];
  char req[NANS][2048];
} script;

static void *script_run(void *arg) {
  script *s = arg;
  for (; s->served < s->n; s->served++) {
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0)
      break;
    size_t got = 0;
    char *req = s->req[s->served];
    while (got < sizeof(s->req[0]) - 1 && !strstr(req, "\r\n\r\n")) {
      ssize_t n = recv(fd, req + got, sizeof(s->req[0]) - 1 - got, 0);
      if (n <= 0)
        break;
      req[got += (size_t)n] = '\0';
    }
    send(fd, s->ans[s->served], s->ans_len[s->served], MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);
    for (char sink[256]; recv(fd, sink, sizeof(sink), 0) > 0;)
      continue;
    close(fd);
  }
  close(s->lfd);
  return NULL;
}

/* One canned answer: the status and headers (each ending "\r\n"; the
 * connection closes after it), then body. */
static void script_add(script *s, const char *body, size_t body_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void script_add(script *s, const char *body, size_t body_len, const char *fmt, ...) {
  va_list ap;
  ASSERT_LT(s->n, NANS);
  va_start(ap, fmt);
  int n = vsnprintf(s->ans[s->n], sizeof(s->ans[0]), fmt, ap);
  va_end(ap);
  static const char end[] = "Connection: close\r\n\r\n";
  ASSERT(n > 0 && (size_t)n + sizeof(end) + body_len < sizeof(s->ans[0]));
  memcpy(s->ans[s->n] + n, end, sizeof(end) - 1);
  memcpy(s->ans[s->n] + n + sizeof(end) - 1, body, body_len);
  s->ans_len[s->n++] = (size_t)n + sizeof(end) - 1 + body_len;
}

/* A 206 of OBJ's bytes [first, last], its Content-Range and Content-Length true. */
static void script_206(script *s, int first, int last) {
  script_add(s, OBJ + first, (size_t)(last - first + 1),
             H206 "ETag: " ETAG "\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n",
             first, last, OBJ_LEN, last - first + 1);
}

static void script_error(script *s, int status, const char *code, const char *extra) {
  char xml[256];
  int n = snprintf(xml, sizeof(xml), "<Error><Code>%s</Code><Message>m</Message></Error>", code);
  script_add(s, xml, (size_t)n,
             "HTTP/1.1 %d X\r\n%sContent-Type: application/xml\r\nContent-Length: %d\r\n", status,
             extra, n);
}

/* Starts the server on the scripted answers and a client of "s3://bkt" at
 * it (uri: the location, with or without its '/'), quick to back off. */
static s3_client *script_start(script *s, const char *uri) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  char ep[64], err[256];
  s3_client *c = NULL;
  ASSERT((s->lfd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
  ASSERT_EQ(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(s->lfd, 8), 0);
  ASSERT_EQ(getsockname(s->lfd, (struct sockaddr *)&a, &alen), 0);
  s->port = ntohs(a.sin_port);
  ASSERT_EQ(pthread_create(&s->th, NULL, script_run, s), 0);
  snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", s->port);
  setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
  ASSERT_EQ(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
  s3_options o = {
      .uri = uri, .endpoint = ep, .max_attempts = 3, .backoff_base_ms = 1, .backoff_max_ms = 5};
  ASSERT_OK(s3_client_new(&o, &c, err, sizeof(err)));
  ASSERT_STR_EQ(s3_client_location(c)->prefix, "");
  return c;
}

/* Waits for the server (it has served every answer, or stops at the next
 * accept: its socket is shut down) and frees the client. */
static void script_end(script *s, s3_client *c) {
  if (s->served < s->n)
    shutdown(s->lfd, SHUT_RDWR);
  pthread_join(s->th, NULL);
  s3_client_free(c);
  curl_global_cleanup();
}

TEST(range_middle_at_bucket_root) {
  /* "s3://bkt" and "s3://bkt/" both name the bucket's root: names are whole keys. */
  const char *uris[] = {"s3://bkt", "s3://bkt/"};
  for (int u = 0; u < 2; u++) {
    script s = {0};
    char buf[16], err[512];
    size_t got = 99;
    memset(buf, '#', sizeof(buf));
    script_206(&s, 10, 17);
    s3_client *c = script_start(&s, uris[u]);
    ASSERT_OK(s3_get_range(c, "data/part-0", 10, 8, NULL, buf, &got, err, sizeof(err)));
    ASSERT_EQ(got, 8);
    ASSERT(memcmp(buf, OBJ + 10, 8) == 0);
    ASSERT_EQ(buf[8], '#'); /* nothing past len */
    ASSERT_EQ(s3_client_last_attempts(c), 1);
    script_end(&s, c);
    ASSERT_STR_CONTAINS(s.req[0], "GET /bkt/data/part-0 HTTP/1.1\r\n");
    ASSERT_STR_CONTAINS(s.req[0], "\r\nRange: bytes=10-17\r\n");
    ASSERT(strstr(s.req[0], "If-Match") == NULL);
  }
}

TEST(range_past_end_at_end_absent) {
  script s = {0};
  char buf[16], err[512];
  size_t got = 99;
  script_206(&s, 30, 35); /* asked 30-39: the object ends at 35 */
  script_error(&s, 416, "InvalidRange", "Content-Range: bytes */36\r\n");
  script_error(&s, 416, "InvalidRange", "");
  script_error(&s, 404, "NoSuchKey", "");
  s3_client *c = script_start(&s, "s3://bkt");
  ASSERT_OK(s3_get_range(c, "k", 30, 10, NULL, buf, &got, err, sizeof(err)));
  ASSERT_EQ(got, 6);
  ASSERT(memcmp(buf, OBJ + 30, 6) == 0);
  got = 99;
  ASSERT_OK(s3_get_range(c, "k", OBJ_LEN, 10, NULL, buf, &got, err, sizeof(err)));
  ASSERT_EQ(got, 0);
  got = 99;
  ASSERT_OK(s3_get_range(c, "k", 1000, 10, NULL, buf, &got, err, sizeof(err)));
  ASSERT_EQ(got, 0);
  ASSERT_EQ(s3_get_range(c, "gone", 0, 8, NULL, buf, &got, err, sizeof(err)), CTRAIN_E_NOTFOUND);
  ASSERT_STR_CONTAINS(err, "s3://bkt/gone bytes 0-7: HTTP 404 NoSuchKey");
  ASSERT_EQ(s3_client_last_retryable(c), 0);
  /* len 0 asks nothing: no request (the server has no answer left). */
  got = 99;
  ASSERT_OK(s3_get_range(c, "k", 5, 0, NULL, buf, &got, err, sizeof(err)));
  ASSERT_EQ(got, 0);
  ASSERT_EQ(s3_client_last_attempts(c), 0);
  script_end(&s, c);
  ASSERT_STR_CONTAINS(s.req[0], "\r\nRange: bytes=30-39\r\n");
  ASSERT_STR_CONTAINS(s.req[1], "\r\nRange: bytes=36-45\r\n");
}

TEST(range_if_match_412_is_data) {
  script s = {0};
  char buf[16], err[512];
  size_t got = 99;
  script_error(&s, 412, "PreconditionFailed", "");
  script_add(&s, OBJ, 8, /* a store that ignores If-Match: the ETag tells */
             H206 "ETag: \"e2\"\r\nContent-Range: bytes 0-7/36\r\nContent-Length: 8\r\n");
  s3_client *c = script_start(&s, "s3://bkt");
  ASSERT_EQ(s3_get_range(c, "k", 0, 8, ETAG, buf, &got, err, sizeof(err)), CTRAIN_E_DATA);
  ASSERT_STR_CONTAINS(err, "s3://bkt/k bytes 0-7");
  ASSERT_STR_CONTAINS(err, "HTTP 412 PreconditionFailed");
  ASSERT_STR_CONTAINS(err, "changed while being read");
  ASSERT_EQ(s3_client_last_attempts(c), 1); /* not retried */
  ASSERT_EQ(s3_client_last_retryable(c), 0);
  ASSERT_EQ(got, 0);
  ASSERT_EQ(s3_get_range(c, "k", 0, 8, ETAG, buf, &got, err, sizeof(err)), CTRAIN_E_DATA);
  ASSERT_STR_CONTAINS(err, "changed while being read: ETag \"e2\", not the If-Match \"e1\"");
  /* An ETag that would smuggle a header is refused before any request. */
  ASSERT_EQ(s3_get_range(c, "k", 0, 8, "\"x\"\r\nX-Evil: 1", buf, &got, err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_EQ(s3_get_range(c, "k", -1, 8, NULL, buf, &got, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_EQ(s3_get_range(c, "k", 0, S3_RANGE_MAX + 1, NULL, buf, &got, err, sizeof(err)),
            CTRAIN_E_INVAL);
  script_end(&s, c);
  ASSERT_STR_CONTAINS(s.req[0], "\r\nIf-Match: \"e1\"\r\n");
  ASSERT_EQ(s.served, 2);
}

TEST(range_answered_200_whole_object) {
  /* A 200 with the whole object is taken only when it is the range asked
   * (from 0, within len); otherwise a failed attempt, retried, never sliced. */
  script s = {0};
  char buf[64], err[512];
  size_t got = 99;
  for (int i = 0; i < 4; i++)
    script_add(&s, OBJ, OBJ_LEN, "HTTP/1.1 200 OK\r\nETag: " ETAG "\r\nContent-Length: %d\r\n",
               OBJ_LEN);
  s3_client *c = script_start(&s, "s3://bkt");
  ASSERT_EQ(s3_get_range(c, "k", 10, 8, ETAG, buf, &got, err, sizeof(err)), CTRAIN_E_NET);
  ASSERT_STR_CONTAINS(err, "s3://bkt/k bytes 10-17");
  ASSERT_STR_CONTAINS(err, "HTTP 200 with 36 bytes (Content-Length) from offset 0: the Range "
                           "bytes=10-17 was ignored (3 attempts)");
  ASSERT_EQ(s3_client_last_retryable(c), 1);
  ASSERT_EQ(got, 0);
  ASSERT_OK(s3_get_range(c, "k", 0, sizeof(buf), ETAG, buf, &got, err, sizeof(err)));
  ASSERT_EQ(got, OBJ_LEN);
  ASSERT(memcmp(buf, OBJ, OBJ_LEN) == 0);
  script_end(&s, c);
}

TEST(range_body_longer_than_asked_is_cut) {
  script s = {0};
  char buf[16], err[512];
  size_t got = 99;
  memset(buf, '#', sizeof(buf));
  /* Close-delimited: the right Content-Range, then 20 bytes for 8. */
  script_add(&s, OBJ, 20, H206 "Content-Range: bytes 0-7/36\r\n");
  /* A Content-Range that is not the one asked for (a longer range). */
  script_add(&s, OBJ, 16, H206 "Content-Range: bytes 0-15/36\r\nContent-Length: 16\r\n");
  script_206(&s, 0, 7);
  s3_client *c = script_start(&s, "s3://bkt");
  ASSERT_OK(s3_get_range(c, "k", 0, 8, NULL, buf, &got, err, sizeof(err)));
  ASSERT_EQ(got, 8);
  ASSERT(memcmp(buf, OBJ, 8) == 0);
  ASSERT_EQ(buf[8], '#');
  ASSERT_EQ(s3_client_last_attempts(c), 3);
  script_end(&s, c);
}

TEST(range_retries_run_out_or_succeed) {
  script s = {0};
  char buf[16], err[512];
  size_t got = 99;
  /* Cut short (the full Content-Length declared), then 503, then served. */
  script_add(&s, OBJ, 4, H206 "Content-Range: bytes 4-11/36\r\nContent-Length: 8\r\n");
  script_error(&s, 503, "SlowDown", "");
  script_206(&s, 4, 11);
  /* Then too long every time: the client's retryable failure. */
  for (int i = 0; i < 3; i++)
    script_add(&s, OBJ, 30, H206 "Content-Range: bytes 4-11/36\r\n");
  s3_client *c = script_start(&s, "s3://bkt");
  ASSERT_OK(s3_get_range(c, "k", 4, 8, NULL, buf, &got, err, sizeof(err)));
  ASSERT_EQ(got, 8);
  ASSERT(memcmp(buf, OBJ + 4, 8) == 0);
  ASSERT_EQ(s3_client_last_attempts(c), 3);
  ASSERT_EQ(s3_get_range(c, "k", 4, 8, NULL, buf, &got, err, sizeof(err)), CTRAIN_E_TOOBIG);
  ASSERT_EQ(s3_client_last_retryable(c), 1);
  ASSERT_STR_CONTAINS(err, "s3://bkt/k bytes 4-11: answer too large");
  ASSERT_EQ(got, 0);
  script_end(&s, c);
}

TEST_MAIN(T(sigv4_suite_get_vanilla), T(sigv4_suite_query_and_post), T(sigv4_s3_get_object),
          T(sigv4_s3_put_object), T(sigv4_s3_bucket_requests), T(sigv4_header_canonical_form),
          T(uri_encode), T(location_defaults), T(location_endpoint_override),
          T(location_errors_name_the_problem), T(xml_error_and_list), T(classify_http),
          T(classify_transport), T(backoff_grows_with_jitter_and_cap),
          T(range_middle_at_bucket_root), T(range_past_end_at_end_absent),
          T(range_if_match_412_is_data), T(range_answered_200_whole_object),
          T(range_body_longer_than_asked_is_cut), T(range_retries_run_out_or_succeed))
