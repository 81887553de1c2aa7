/* test_backup_uris.c - the worker's parser of backup URIs (s3_location_parse,
 * over ctrain_backup_uri_parse in common/) against tests/data/backup_uris.tsv,
 * the table the apiserver (tests/integration/test_backup_uris.py) and the
 * controller (test_reconcile.c) are held to as well; then the fields and
 * messages of a few. */
#include "test.h"

#include "backup_uris.h"
#include "ctrain/backup_uri.h"
#include "ctrain/s3_proto.h"

TEST(table_worker_parser) {
  backup_uri_row *rows = NULL;
  int n = backup_uris_load(BACKUP_URIS_TSV, &rows);
  ASSERT_GE(n, 60);
  int wrong = 0, yes = 0;
  for (int i = 0; i < n; i++) {
    const backup_uri_row *r = &rows[i];
    s3_location l;
    char err[512] = "", why[256] = "";
    int worker = s3_location_parse(r->uri, NULL, NULL, &l, err, sizeof err) == CTRAIN_OK;
    /* An endpoint or region changes where, never whether. */
    int with_ep = s3_location_parse(r->uri, "http://127.0.0.1:9000", "eu-west-1", &l, err,
                                    sizeof err) == CTRAIN_OK;
    ctrain_backup_uri u;
    int common = ctrain_backup_uri_parse(r->uri, &u, why, sizeof why) == CTRAIN_OK;
    if (worker != r->accepted || with_ep != worker || common != worker) {
      fprintf(stderr, "backup_uris.tsv:%d: %s (%s): table %s, worker %s, common %s: %s\n", r->line,
              r->uri, r->why, r->accepted ? "yes" : "no", worker ? "yes" : "no",
              common ? "yes" : "no", worker ? why : err);
      wrong++;
      continue;
    }
    yes += worker;
    if (worker) {
      /* What was taken is the URI: the bucket and the prefix, less one '/'. */
      char again[2100];
      snprintf(again, sizeof again, "%s://%s%s%s", l.scheme, l.bucket, l.prefix[0] ? "/" : "",
               l.prefix);
      size_t ul = strlen(r->uri), al = strlen(again);
      ASSERT(al == ul || (al + 1 == ul && r->uri[ul - 1] == '/'));
      ASSERT(!strncmp(again, r->uri, al));
      ASSERT_STR_EQ(u.bucket, l.bucket);
      ASSERT_STR_EQ(u.prefix, l.prefix);
      ASSERT_EQ(u.gcs, l.scheme[0] == 'g');
    } else {
      ASSERT(err[0] && why[0]);
    }
  }
  printf("# %d rows, %d accepted, %d refused, %d disagree with the table\n", n, yes, n - yes,
         wrong);
  free(rows);
  ASSERT_EQ(wrong, 0);
}

TEST(fields_and_messages) {
  ctrain_backup_uri u;
  char why[256];
  ASSERT_OK(ctrain_backup_uri_parse("gs://my_bucket/a/b/", &u, why, sizeof why));
  ASSERT_EQ(u.gcs, 1);
  ASSERT_STR_EQ(u.bucket, "my_bucket");
  ASSERT_STR_EQ(u.prefix, "a/b");
  ASSERT_OK(ctrain_backup_uri_parse("s3://abc/", &u, why, sizeof why));
  ASSERT_EQ(u.gcs, 0);
  ASSERT_STR_EQ(u.prefix, "");
  ASSERT_OK(ctrain_backup_uri_parse("s3://abc", NULL, why, sizeof why));

  struct {
    const char *uri, *says;
  } bad[] = {
      {"s3://a_b", "bad bucket name 'a_b': an s3:// bucket name holds only a-z, 0-9, '.' and '-'"},
      {"s3://192.168.5.4/x", "not an IP address"},
      {"s3://xn--abc", "reserved by AWS"},
      {"s3://abc--x-s3", "reserved by AWS"},
      {"gs://goog1", "reserved by Google"},
      {"s3://a..b", "no empty label"},
      {"s3://ab-.c", "begins and ends with a letter or digit"},
      {"s3://abc/a b", "prefix holds ' '"},
      {"s3://abc/x\ny", "control byte (0x0a)"},
      {"s3://abc/caf\xc3\xa9", "non-ASCII byte (0xc3)"},
      {"s3://abc//", "empty segment"},
      {"s3://abc/a/../b", "'..' segment"},
      {"s3://\x1b[2J/p", "bad bucket name: "},
      {"ftp://abc", "scheme must be s3:// or gs://"},
      {"", "empty"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ASSERT_EQ(ctrain_backup_uri_parse(bad[i].uri, NULL, why, sizeof why), CTRAIN_E_CONFIG);
    ASSERT_STR_CONTAINS(why, bad[i].says);
  }
  ASSERT_EQ(ctrain_backup_uri_parse(NULL, NULL, why, sizeof why), CTRAIN_E_CONFIG);

  /* The worker names the URI, its control bytes escaped. */
  s3_location l;
  char err[512];
  ASSERT_EQ(s3_location_parse("s3://abc/x\ny", NULL, NULL, &l, err, sizeof err), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "checkpoint uri 's3://abc/x\\ny': prefix holds a control byte");
}

TEST_MAIN(T(table_worker_parser), T(fields_and_messages))
