/* test_tensorboard.c - Event protos byte for byte (the wire format of
 * tensorflow/core/util/event.proto and summary.proto), the event file's
 * TFRecord framing and CRCs, the restart marker. The real tensorboard
 * package reads what ctrain-worker writes in bench/tensorboard_resume.py
 * (tools/tb_check.py). */
#include "test.h"
#include "test_fs.h"

#include "worker/data/tfrecord.h"
#include "worker/tensorboard.h"

static char tmpdir[256];

static void rm_tmp(void) {
  fs_rm_rf(tmpdir);
}

TEST(event_bytes) {
  uint8_t out[256];
  const char *tags[] = {"loss"};
  double v[] = {0.25};
  /* wall_time 1.5 (field 1, double), step 3 (field 2), summary (field 5):
   * Summary.value (1) {tag (1) "loss", simple_value (2, float) 0.25}. */
  static const uint8_t want[] = {0x09, 0,    0,    0,    0,    0,    0,    0xf8, 0x3f,
                                 0x10, 0x03, 0x2a, 0x0d, 0x0a, 0x0b, 0x0a, 0x04, 'l',
                                 'o',  's',  's',  0x15, 0,    0,    0x80, 0x3e};
  size_t n = tb_encode_event(1.5, 3, TB_SCALARS, tags, v, 1, out, sizeof(out));
  ASSERT_EQ(n, sizeof(want));
  ASSERT_EQ(memcmp(out, want, n), 0);
  /* file_version (3) "brain.Event:2"; session_log (7) {status (1) START = 1}. */
  n = tb_encode_event(1.5, 0, TB_FILE_VERSION, NULL, NULL, 0, out, sizeof(out));
  ASSERT_EQ(n, 9 + 2 + 2 + 13);
  ASSERT_EQ(out[11], 0x1a);
  ASSERT_EQ(out[12], 13);
  ASSERT_EQ(memcmp(out + 13, "brain.Event:2", 13), 0);
  n = tb_encode_event(1.5, 300, TB_SESSION_START, NULL, NULL, 0, out, sizeof(out));
  static const uint8_t start[] = {0x10, 0xac, 0x02, 0x3a, 0x02, 0x08, 0x01};
  ASSERT_EQ(n, 9 + sizeof(start));
  ASSERT_EQ(memcmp(out + 9, start, sizeof(start)), 0);
  /* Too small a buffer is 0, never a partial event. */
  ASSERT_EQ(tb_encode_event(1.5, 3, TB_SCALARS, tags, v, 1, out, 20), 0);
}

static void le32(uint8_t out[4], uint32_t v) {
  for (int i = 0; i < 4; i++)
    out[i] = (uint8_t)(v >> (8 * i));
}

/* Reads record k of the file (CRCs checked) into buf; its length. */
static size_t record(FILE *f, uint8_t *buf, size_t cap) {
  uint8_t hdr[12], foot[4], want[4];
  ASSERT_EQ(fread(hdr, 1, 12, f), 12);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = n << 8 | hdr[i];
  ASSERT_LE(n, cap);
  le32(want, tfr_masked_crc(hdr, 8));
  ASSERT_EQ(memcmp(hdr + 8, want, 4), 0);
  ASSERT_EQ(fread(buf, 1, n, f), n);
  ASSERT_EQ(fread(foot, 1, 4, f), 4);
  le32(want, tfr_masked_crc(buf, n));
  ASSERT_EQ(memcmp(foot, want, 4), 0);
  return (size_t)n;
}

TEST(event_file_framing_and_restart) {
  fs_make_dir(tmpdir, sizeof(tmpdir), "ctrain-test-tb");
  atexit(rm_tmp);
  char dir[512], err[512] = "";
  snprintf(dir, sizeof(dir), "%s/tb", tmpdir); /* made by tb_open */
  tb_writer *w = NULL;
  const char *tags[] = {"loss", "accuracy"};
  double v[] = {0.5, 0.75};
  ASSERT_OK(tb_open(dir, 4, &w, err, sizeof(err)));
  ASSERT_STR_CONTAINS(tb_path(w), "/tb/events.out.tfevents.");
  ASSERT_OK(tb_scalars(w, 4, tags, v, 2, err, sizeof(err)));
  FILE *f = fopen(tb_path(w), "rb");
  ASSERT_NOT_NULL(f);
  uint8_t buf[512];
  size_t n = record(f, buf, sizeof(buf)); /* flushed as written */
  ASSERT_EQ(buf[11], 0x1a);               /* file_version first */
  n = record(f, buf, sizeof(buf));
  ASSERT_EQ(buf[9], 0x10);
  ASSERT_EQ(buf[10], 4);
  ASSERT_EQ(buf[11], 0x3a); /* session_log START at the start step */
  n = record(f, buf, sizeof(buf));
  ASSERT_EQ(buf[11], 0x2a); /* the summary */
  ASSERT_EQ(n, 11 + 2 + 2 * 2 + 2 * (2 + 4 + 5) + 4);
  ASSERT_EQ(fgetc(f), EOF);
  fclose(f);
  tb_close(w);
  /* A fresh run's file starts with a START too (at step 1): TensorBoard's
   * server takes a run's first START as its start, a later one (a resumed
   * run's) as the restart that supersedes. (Another directory: the same
   * second and pid would name the same file.) */
  snprintf(dir, sizeof(dir), "%s/tb2", tmpdir);
  ASSERT_OK(tb_open(dir, 1, &w, err, sizeof(err)));
  f = fopen(tb_path(w), "rb");
  ASSERT_NOT_NULL(f);
  record(f, buf, sizeof(buf));
  record(f, buf, sizeof(buf));
  ASSERT_EQ(buf[9], 0x10);
  ASSERT_EQ(buf[10], 1);
  ASSERT_EQ(buf[11], 0x3a);
  ASSERT_EQ(fgetc(f), EOF);
  fclose(f);
  tb_close(w);
  tb_close(NULL);
  /* A path that cannot be a directory. */
  snprintf(dir, sizeof(dir), "%s/file", tmpdir);
  fs_put_file(dir, "x");
  ASSERT_EQ(tb_open(dir, 0, &w, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "/file/events.out.tfevents.");
  ASSERT_NULL(w);
}

TEST_MAIN(T(event_bytes), T(event_file_framing_and_restart))
