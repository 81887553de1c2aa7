/* options.c - ctrain-worker flag parsing (the table-driven ctrain/flags.h).
 *
 * wk_flags below is the one place a flag is written: its name, how its value
 * is checked and where it goes (for ctrain_flags_parse), and its metavar and
 * help sentence (for --help). */
#include "worker/options.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/contract.h"
#include "ctrain/flags.h"
#include "ctrain/log.h"
#include "worker/data/stream.h"

#define WK_TERMINATION_LOG "/dev/termination-log" /* the kubelet's default path */
#define WK_STR_(x)         #x
#define WK_STR(x)          WK_STR_(x)
/* The streaming reader's bounds: a shuffle buffer of 2^24 records (64 MiB of
 * indices, its records on top), a read-ahead of 64 KiB..64 GiB. */
#define WK_MAX_SHUFFLE_BUFFER (1 << 24)
#define WK_MIN_PREFETCH       ((uint64_t)64 << 10)
#define WK_MAX_PREFETCH       ((uint64_t)64 << 30)

/* What parsing fills: the options, and the flags' raw values that become
 * options after (enums, the 64-bit values, --no-overlap). */
typedef struct {
  wk_options o;
  int format, comp, shard, coll, sched, overlap, no_overlap;
  uint64_t seed, s3_max_send, shuffle_buffer, prefetch;
} wk_parse_state;

/* One flag: flag.dst is unset (the flag's value goes to `off` bytes into a
 * wk_parse_state); --help prints "--name METAVAR  help" (help NULL: an alias,
 * not listed; a '\n' in help starts a new line). builtin: ctrain_flags_parse
 * handles it itself (-h, --help), so it is only listed. */
typedef struct {
  ctrain_flag flag;
  size_t off;
  char short_name;
  int builtin;
} wk_flag;

#define OPT(field) offsetof(wk_parse_state, o.field)
#define RAW(field) offsetof(wk_parse_state, field)

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* cpu | cpu:R | gpu | gpu:R | auto, R in 1..WK_MAX_REPLICAS (dst: the
 * options, device and replicas). */
static int parse_device(const char *s, void *dst) {
  wk_options *o = dst;
  long r = 0;
  const char *colon = strchr(s, ':');
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  if (colon && parse_long(colon + 1, 1, WK_MAX_REPLICAS, &r))
    return -1;
  if (n == 3 && !strncmp(s, "cpu", 3))
    o->device = WK_DEVICE_CPU;
  else if (n == 3 && !strncmp(s, "gpu", 3))
    o->device = WK_DEVICE_GPU;
  else if (!colon && !strcmp(s, "auto"))
    o->device = WK_DEVICE_AUTO;
  else
    return -1;
  o->replicas = (int)r;
  return 0;
}

/* H[,W[,C]], each in 1..65536 (dst: the options, image_rank and
 * image_shape; data.c caps the product). */
static int parse_shape(const char *s, void *dst) {
  wk_options *o = dst;
  int rank = 0, shape[3] = {0};
  const char *p = s;
  while (rank < 3) {
    char *end = NULL;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || end == p || v < 1 || v > 65536 || (*end && *end != ','))
      return -1;
    shape[rank++] = (int)v;
    if (!*end) {
      o->image_rank = rank;
      memcpy(o->image_shape, shape, sizeof(shape));
      return 0;
    }
    p = end + 1;
  }
  return -1;
}

/* epoch | N > 0 (dst: int). */
static int parse_save_freq(const char *s, void *dst) {
  long l;
  if (!strcmp(s, "epoch")) {
    *(int *)dst = 0;
    return 0;
  }
  if (parse_long(s, 1, 1L << 30, &l))
    return -1;
  *(int *)dst = (int)l;
  return 0;
}

static const char *const formats[] = {"idx", "raw", "tfrecord", "numpy", "auto", NULL};
static const int format_vals[] = {DATA_FMT_IDX, DATA_FMT_RAW, DATA_FMT_TFRECORD, DATA_FMT_NUMPY,
                                  DATA_FMT_AUTO};
static const char *const comps[] = {"auto", "none", "gzip", "zlib", NULL};
static const int comp_vals[] = {DATA_COMP_AUTO, DATA_COMP_NONE, DATA_COMP_GZIP, DATA_COMP_ZLIB};
static const char *const shards[] = {"auto", "file", "data", "off", NULL};
static const int shard_vals[] = {DATA_SHARD_AUTO, DATA_SHARD_FILE, DATA_SHARD_DATA, DATA_SHARD_OFF};
static const char *const optimizers[] = {"sgd", "adam", NULL};
static const char *const colls[] = {"ring", "nccl", "auto", NULL};
static const int coll_vals[] = {WK_COLL_RING, WK_COLL_NCCL, WK_COLL_AUTO};
static const char *const scheds[] = {"constant", "cosine", NULL};
static const int sched_vals[] = {WK_LR_CONSTANT, WK_LR_COSINE};
static const char *const overlaps[] = {"auto", "on", "off", NULL};
static const int overlap_vals[] = {WK_OVERLAP_AUTO, WK_OVERLAP_ON, WK_OVERLAP_OFF};

/* The flags, in --help's order. */
static const wk_flag wk_flags[] = {
    {.flag = {.name = "model",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "FILE",
              .help = "model config: a JSON layer list or Keras model.to_json()"},
     .off = OPT(model)},
    {.flag = {.name = "data",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "SPEC",
              .help = "training data: an IDX prefix or images file, or (other formats) files, "
                      "directories, globs or s3://|gs:// objects, prefixes and globs, "
                      "comma-separated"},
     .off = OPT(data)},
    {.flag = {.name = "test-data",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "SPEC",
              .help = "evaluation data (optional), as --data"},
     .off = OPT(test_data)},
    {.flag = {.name = "data-format",
              .kind = CTRAIN_FLAG_CHOICE,
              .choices = formats,
              .values = format_vals,
              .metavar = "auto|idx|raw|tfrecord|numpy",
              .help = "data format (alias --format; default auto: tfrecord for "
                      "*.tfrecord[s][.gz|.zlib], numpy for *.npy|*.npz, else idx)"},
     .off = RAW(format)},
    {.flag = {.name = "format", /* the flag's first name, kept */
              .kind = CTRAIN_FLAG_CHOICE,
              .choices = formats,
              .values = format_vals},
     .off = RAW(format)},
    {.flag = {.name = "compression",
              .kind = CTRAIN_FLAG_CHOICE,
              .choices = comps,
              .values = comp_vals,
              .metavar = "auto|none|gzip|zlib",
              .help =
                  "TFRecord compression (default auto: gzip by its magic, zlib for *.zlib|*.zz, "
                  "else none)"},
     .off = RAW(comp)},
    {.flag = {.name = "feature-image",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "NAME",
              .help = "TFRecord: the Example's image feature, a bytes_list of raw uint8 (scaled to "
                      "[0,1]) or a float_list (default image)"},
     .off = OPT(feature_image)},
    {.flag = {.name = "feature-label",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "NAME",
              .help = "TFRecord: the int64_list label feature (default label)\n"
                      ".npz: the arrays' names (default x, y); .npy: the labels file is the images "
                      "file's name with the image name replaced by the label name"},
     .off = OPT(feature_label)},
    {.flag = {.name = "image-shape",
              .kind = CTRAIN_FLAG_FUNC,
              .parse = parse_shape,
              .expect = "H[,W[,C]], each in 1..65536",
              .metavar = "H[,W[,C]]",
              .help = "TFRecord: the image's shape (required for bytes; default for floats: the "
                      "list's length)"},
     .off = offsetof(wk_parse_state, o),
     /* parse_shape: the options */},
    {.flag = {.name = "shard",
              .kind = CTRAIN_FLAG_CHOICE,
              .choices = shards,
              .values = shard_vals,
              .metavar = "auto|file|data|off",
              .help = "auto-shard policy as tf.data defines it (default auto)"},
     .off = RAW(shard)},
    {.flag = {.name = "data-stream",
              .kind = CTRAIN_FLAG_SET,
              .help =
                  "read TFRecord/NumPy shards as a stream in bounded memory, with a shuffle buffer "
                  "(always so for s3:// and gs:// entries in --data)"},
     .off = OPT(data_stream)},
    {.flag = {.name = "shuffle-buffer",
              .kind = CTRAIN_FLAG_U64,
              .metavar = "N",
              .help =
                  "streaming: records in the shuffle buffer, as tf.data's Dataset.shuffle (0: the "
                  "shard order only; default " WK_STR(DATA_STREAM_SHUFFLE_DEFAULT) ")"},
     .off = RAW(shuffle_buffer)},
    {.flag = {.name = "data-prefetch-bytes",
              .kind = CTRAIN_FLAG_U64,
              .metavar = "N",
              .help = "streaming: bytes of shards read ahead (default 268435456)"},
     .off = RAW(prefetch)},
    {.flag = {.name = "data-cache",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "DIR",
              .help =
                  "streaming: keep each object read in DIR (an emptyDir), verified before reuse; "
                  "later epochs read it"},
     .off = OPT(data_cache)},
    {.flag = {.name = "epochs",
              .kind = CTRAIN_FLAG_INT,
              .min = 1,
              .max = 1000000,
              .metavar = "N",
              .help = "epochs (default 1)"},
     .off = OPT(epochs)},
    {.flag = {.name = "batch",
              .kind = CTRAIN_FLAG_INT,
              .min = 1,
              .max = 1 << 20,
              .metavar = "N",
              .help = "per-replica batch size (default 32)"},
     .off = OPT(batch)},
    {.flag = {.name = "optimizer",
              .kind = CTRAIN_FLAG_CHOICE_STR,
              .choices = optimizers,
              .metavar = "sgd|adam",
              .help = "optimizer (default adam)"},
     .off = OPT(optimizer)},
    {.flag = {.name = "lr",
              .kind = CTRAIN_FLAG_DOUBLE,
              .min = 0,
              .max = 1e6,
              .excl = CTRAIN_FLAG_EXCL_MIN,
              .expect = "a positive number",
              .metavar = "X",
              .help = "learning rate (default 0.001)"},
     .off = OPT(lr)},
    {.flag = {.name = "momentum",
              .kind = CTRAIN_FLAG_DOUBLE,
              .min = 0,
              .max = 1,
              .excl = CTRAIN_FLAG_EXCL_MAX,
              .metavar = "X",
              .help = "SGD momentum (default 0)"},
     .off = OPT(momentum)},
    {.flag = {.name = "nesterov", .kind = CTRAIN_FLAG_SET, .help = "Nesterov momentum"},
     .off = OPT(nesterov)},
    {.flag = {.name = "scale-lr",
              .kind = CTRAIN_FLAG_SET,
              .help = "scale lr linearly by replicas in sync"},
     .off = OPT(scale_lr)},
    {.flag = {.name = "warmup-steps",
              .kind = CTRAIN_FLAG_INT,
              .min = 0,
              .max = 1 << 30,
              .expect = "a non-negative integer",
              .metavar = "N",
              .help = "linear lr warm-up steps (default 0)"},
     .off = OPT(warmup_steps)},
    {.flag = {.name = "lr-schedule",
              .kind = CTRAIN_FLAG_CHOICE,
              .choices = scheds,
              .values = sched_vals,
              .metavar = "constant|cosine",
              .help =
                  "after the warm-up: lr throughout, or a cosine decay from lr to 0 over the rest "
                  "of the run's steps (all --epochs; Keras' CosineDecay; default constant)"},
     .off = RAW(sched)},
    {.flag = {.name = "seed",
              .kind = CTRAIN_FLAG_U64,
              .metavar = "N",
              .help = "seed for init, shuffling, dropout (default 42)"},
     .off = RAW(seed)},
    {.flag = {.name = "device",
              .kind = CTRAIN_FLAG_FUNC,
              .parse = parse_device,
              .expect = "cpu, cpu:R, gpu, gpu:R or auto (R in 1..64)",
              .metavar = "cpu[:R]|gpu[:R]|auto",
              .help =
                  "compute device and local replicas (default auto: all visible GPUs, else cpu:1)"},
     .off = offsetof(wk_parse_state, o),
     /* parse_device: the options */},
    {.flag = {.name = "collective",
              .kind = CTRAIN_FLAG_CHOICE,
              .choices = colls,
              .values = coll_vals,
              .metavar = "ring|nccl|auto",
              .help = "all-reduce backend (default auto)"},
     .off = RAW(coll)},
    {.flag = {.name = "overlap",
              .kind = CTRAIN_FLAG_CHOICE,
              .choices = overlaps,
              .values = overlap_vals,
              .metavar = "auto|on|off",
              .help =
                  "all-reduce the gradients in buckets during the backward pass (on) or after it "
                  "(off); auto times both in the first steps and keeps the faster (the same bits "
                  "any way; default auto)"},
     .off = RAW(overlap)},
    {.flag = {.name = "no-overlap", .kind = CTRAIN_FLAG_SET, .help = "--overlap off"},
     .off = RAW(no_overlap)},
    {.flag = {.name = "backup-dir",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "DIR",
              .help = "BackupAndRestore directory (default $" CTRAIN_ENV_BACKUP_DIR ")"},
     .off = OPT(backup_dir)},
    {.flag = {.name = "backup-uri",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "s3://B/P|gs://B/P",
              .help = "backups in object storage instead (default $" CTRAIN_ENV_BACKUP_URI
                      "); credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY [, "
                      "AWS_SESSION_TOKEN, AWS_REGION]"},
     .off = OPT(backup_uri)},
    {.flag = {.name = "s3-endpoint",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "URL",
              .help =
                  "S3-compatible endpoint for backups and data (default $" CTRAIN_ENV_S3_ENDPOINT
                  ", else $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL)"},
     .off = OPT(s3_endpoint)},
    {.flag = {.name = "s3-max-send-rate",
              .kind = CTRAIN_FLAG_U64,
              .metavar = "N",
              .help = "cap backup uploads at N bytes/s (default 0: none)"},
     .off = RAW(s3_max_send)},
    {.flag = {.name = "save-freq",
              .kind = CTRAIN_FLAG_FUNC,
              .parse = parse_save_freq,
              .expect = "'epoch' or a positive step count",
              .metavar = "epoch|N",
              .help = "back up each epoch or every N steps (default epoch)"},
     .off = OPT(save_freq)},
    {.flag = {.name = "keep",
              .kind = CTRAIN_FLAG_INT,
              .min = 1,
              .max = 1000,
              .metavar = "N",
              .help = "backups kept (default 2)"},
     .off = OPT(keep)},
    {.flag = {.name = "keep-backup", .kind = CTRAIN_FLAG_SET, .help = "keep backups after success"},
     .off = OPT(keep_backup)},
    {.flag = {.name = "backup-ignore-config",
              .kind = CTRAIN_FLAG_SET,
              .help = "restore even if the training config changed"},
     .off = OPT(backup_ignore_config)},
    {.flag = {.name = "output",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "DIR",
              .help = "final model directory"},
     .off = OPT(output)},
    {.flag = {.name = "weights",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "FILE",
              .help = "evaluate: safetensors weights (default DIR/model.safetensors)"},
     .off = OPT(weights)},
    {.flag = {.name = "metrics",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "FILE",
              .help = "JSON-lines metrics file"},
     .off = OPT(metrics)},
    {.flag = {.name = "tensorboard-dir",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "DIR",
              .help = "chief: TensorBoard event file (scalars per epoch: loss, accuracy, val_*, "
                      "learning_rate, samples/s)"},
     .off = OPT(tensorboard_dir)},
    {.flag = {.name = "tensorboard-freq",
              .kind = CTRAIN_FLAG_INT,
              .min = 0,
              .max = 1 << 30,
              .expect = "a non-negative step count (0: epochs only)",
              .metavar = "N",
              .help =
                  "also every N global steps, into DIR/steps (batch_* tags, step = global step; "
                  "default 0: epochs only)"},
     .off = OPT(tensorboard_freq)},
    {.flag = {.name = "progress-port",
              .kind = CTRAIN_FLAG_INT,
              .min = 0,
              .max = 65535,
              .expect = "a port in 0..65535 (0: off)",
              .metavar = "N",
              .help = "serve /progress (chief) and /metrics on N, bearer auth (default "
                      "$" CTRAIN_ENV_PROGRESS_PORT ", else 0: off; the controller sets " WK_STR(
                          CTRAIN_DEFAULT_PROGRESS_PORT) ")"},
     .off = OPT(progress_port)},
    {.flag = {.name = "termination-log",
              .kind = CTRAIN_FLAG_STRING,
              .metavar = "FILE",
              .help = "final metrics JSON ('' off; default " WK_TERMINATION_LOG " when writable)"},
     .off = OPT(termination_log)},
    {.flag = {.name = "rendezvous-timeout",
              .kind = CTRAIN_FLAG_DOUBLE,
              .min = 0.001,
              .max = 86400,
              .expect = "a number of seconds in (0, 86400]",
              .metavar = "SEC",
              .help = "wait this long for peers (default 300)"},
     .off = OPT(rendezvous_timeout)},
    {.flag = {.name = "peer-timeout",
              .kind = CTRAIN_FLAG_DOUBLE,
              .min = 0.001,
              .max = 86400,
              .expect = "a number of seconds in (0, 86400]",
              .metavar = "SEC",
              .help = "declare a silent peer lost (default 10)"},
     .off = OPT(peer_timeout)},
    {.flag = {.name = "log-level",
              .kind = CTRAIN_FLAG_FUNC,
              .parse = ctrain_log_level_flag,
              .expect = CTRAIN_LOG_LEVEL_EXPECT,
              .metavar = "LEVEL",
              .help = "debug|info|warn|error (default info)"},
     .off = OPT(log_level)},
    {.flag = {.name = "version", .kind = CTRAIN_FLAG_SET, .help = "print the version and exit"},
     .off = OPT(show_version)},
    {.flag = {.name = "help", .kind = CTRAIN_FLAG_SET, .help = "print this help and exit"},
     .off = OPT(show_help),
     .short_name = 'h',
     .builtin = 1},
};
#define WK_NFLAGS (sizeof(wk_flags) / sizeof(wk_flags[0]))

/* --help: the column the help sentences start in, and the line width they
 * are wrapped to. */
#define WK_HELP_COL   30
#define WK_HELP_WIDTH 86

/* "  [-h, ]--name[ METAVAR]", padded to WK_HELP_COL, then the help
 * (ctrain_flags_usage_line). */
static void usage_flag(FILE *f, const wk_flag *w) {
  ctrain_flags_usage_line(f, w->short_name, w->flag.name, w->flag.metavar, w->flag.help,
                          WK_HELP_COL, WK_HELP_WIDTH);
}

void wk_options_usage(FILE *f) {
  fputs("Usage: ctrain-worker train [flags]\n"
        "       ctrain-worker evaluate --model DIR|CONFIG [--weights FILE] --test-data PATH\n"
        "\n"
        "Trains a Sequential model with mirrored data parallelism across the workers\n"
        "named in TF_CONFIG (no TF_CONFIG: one local worker).\n"
        "\n"
        "Flags:\n",
        f);
  for (size_t i = 0; i < WK_NFLAGS; i++)
    if (wk_flags[i].flag.help)
      usage_flag(f, &wk_flags[i]);
  fputs("\n"
        "With --backup-dir the chief resumes from the newest backup that verifies;\n"
        "SIGTERM finishes the current step, saves and exits 75.\n"
        "\n"
        "Exit codes: 0 success, 64 usage, 65 bad data, 75 retryable (peer lost,\n"
        "timeout, preempted, backup not writable), 78 bad config (also: a backup\n"
        "written for another training config).\n",
        f);
}

const char *wk_options_flag(size_t i, const char **metavar) {
  for (size_t k = 0; k < WK_NFLAGS; k++) {
    if (!wk_flags[k].flag.help || i-- > 0)
      continue;
    *metavar = wk_flags[k].flag.metavar;
    return wk_flags[k].flag.name;
  }
  *metavar = NULL;
  return NULL;
}

/* The defaults, before the flags. */
static void parse_defaults(wk_parse_state *st) {
  memset(st, 0, sizeof(*st));
  st->o.epochs = 1;
  st->o.batch = 32;
  st->o.optimizer = "adam";
  st->o.lr = 0.001;
  st->o.device = WK_DEVICE_AUTO;
  st->o.keep = 2;
  st->o.rendezvous_timeout = 300.0;
  st->o.peer_timeout = 10.0;
  st->o.log_level = "info";
  st->o.progress_port = -1; /* not given: the environment decides */
  st->format = DATA_FMT_AUTO;
  st->comp = DATA_COMP_AUTO;
  st->shard = DATA_SHARD_AUTO;
  st->coll = WK_COLL_AUTO;
  st->sched = WK_LR_CONSTANT;
  st->overlap = WK_OVERLAP_AUTO;
  st->seed = 42;
  st->shuffle_buffer = UINT64_MAX; /* unset */
}

/* ctrain_flags_parse's table: wk_flags less the builtins, each dst in `st`;
 * `flags` has room for WK_NFLAGS + 1. */
static void parse_table(ctrain_flag *flags, wk_parse_state *st) {
  size_t n = 0;
  for (size_t i = 0; i < WK_NFLAGS; i++) {
    if (wk_flags[i].builtin)
      continue;
    flags[n] = wk_flags[i].flag;
    flags[n++].dst = (char *)st + wk_flags[i].off;
  }
  flags[n] = (ctrain_flag){.name = NULL};
}

/* The flags' raw values into the options. */
static void parse_store(wk_parse_state *st) {
  wk_options *o = &st->o;
  o->format = (data_file_format)st->format;
  o->compression = (data_compression)st->comp;
  o->shard = (data_shard_policy)st->shard;
  o->collective = (wk_collective)st->coll;
  o->lr_schedule = (wk_lr_schedule)st->sched;
  o->overlap = st->no_overlap ? WK_OVERLAP_OFF : (wk_overlap)st->overlap;
  o->seed = (unsigned long long)st->seed;
  o->s3_max_send = st->s3_max_send > (uint64_t)1 << 40 ? 1ll << 40 : (long long)st->s3_max_send;
  o->shuffle_buffer = st->shuffle_buffer == UINT64_MAX ? -1 : (long long)st->shuffle_buffer;
  o->prefetch = (unsigned long long)st->prefetch;
}

int wk_options_streaming(const wk_options *o) {
  return o->data_stream || (o->data && data_spec_has_uri(o->data));
}

/* The streaming reader's flags: in range, and only with it. */
static ctrain_err check_stream_flags(const wk_options *o, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const char *only = o->shuffle_buffer >= 0 ? "--shuffle-buffer"
                     : o->prefetch          ? "--data-prefetch-bytes"
                     : o->data_cache        ? "--data-cache"
                                            : NULL;
  if (only && !wk_options_streaming(o))
    CTRAIN_FAIL(CTRAIN_E_INVAL,
                "%s: applies to the streaming reader; add --data-stream (or give --data as "
                "s3:// or gs:// URIs)",
                only);
  if (o->shuffle_buffer > WK_MAX_SHUFFLE_BUFFER)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--shuffle-buffer %lld: at most %d records", o->shuffle_buffer,
                WK_MAX_SHUFFLE_BUFFER);
  if (o->prefetch && (o->prefetch < WK_MIN_PREFETCH || o->prefetch > WK_MAX_PREFETCH))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--data-prefetch-bytes %llu: give %llu..%llu bytes", o->prefetch,
                (unsigned long long)WK_MIN_PREFETCH, (unsigned long long)WK_MAX_PREFETCH);
  if (wk_options_streaming(o) && (o->format == DATA_FMT_IDX || o->format == DATA_FMT_RAW))
    CTRAIN_FAIL(CTRAIN_E_INVAL,
                "--data-format %s: the streaming reader (--data-stream, object URIs) reads "
                "TFRecord and NumPy shards",
                o->format == DATA_FMT_IDX ? "idx" : "raw");
out:
  return result;
}

/* After the flags: the command (pos[0]) and its needs. */
static ctrain_err finish_command(wk_options *o, char **pos, int npos, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (npos < 1)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "missing command (expected 'train' or 'evaluate')");
  o->command = pos[0];
  if (strcmp(o->command, "train") && strcmp(o->command, "evaluate"))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "unknown command '%s' (expected 'train' or 'evaluate')",
                o->command);
  if (!strcmp(o->command, "evaluate") && (!o->model || !o->test_data))
    CTRAIN_FAIL(CTRAIN_E_INVAL,
                "evaluate needs --model (a model directory or config) and --test-data");
  if (npos > 1)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "unexpected argument '%s'", pos[1]);
out:
  return result;
}

/* Then what the environment sets when no flag did (the controller's
 * variables). */
static ctrain_err finish_env(wk_options *o, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  /* One backup location: flags first, then the environment (the
   * controller sets CTRAIN_BACKUP_DIR or CTRAIN_BACKUP_URI). */
  if (o->backup_dir && o->backup_uri)
    CTRAIN_FAIL(CTRAIN_E_INVAL,
                "--backup-dir and --backup-uri: give one backup location, not both");
  if (!o->backup_dir && !o->backup_uri) {
    const char *dir = getenv(CTRAIN_ENV_BACKUP_DIR), *uri = getenv(CTRAIN_ENV_BACKUP_URI);
    if (dir && *dir && uri && *uri)
      CTRAIN_FAIL(CTRAIN_E_INVAL, "%s and %s are both set: give one backup location",
                  CTRAIN_ENV_BACKUP_DIR, CTRAIN_ENV_BACKUP_URI);
    o->backup_dir = dir && *dir ? dir : NULL;
    o->backup_uri = uri && *uri ? uri : NULL;
  }
  if (!o->s3_endpoint) {
    const char *env = getenv(CTRAIN_ENV_S3_ENDPOINT);
    o->s3_endpoint = env && *env ? env : NULL;
  }
  if (o->progress_port < 0) {
    const char *env = getenv(CTRAIN_ENV_PROGRESS_PORT);
    long port = 0;
    if (env && *env && parse_long(env, 0, 65535, &port))
      CTRAIN_FAIL(CTRAIN_E_INVAL, CTRAIN_ENV_PROGRESS_PORT ": '%s' is not a port in 0..65535", env);
    o->progress_port = (int)port;
  }
  if (!o->termination_log && access(WK_TERMINATION_LOG, W_OK) == 0)
    o->termination_log = WK_TERMINATION_LOG;
  else if (o->termination_log && !*o->termination_log)
    o->termination_log = NULL;
out:
  return result;
}

ctrain_err wk_options_parse(wk_options *o, int argc, char **argv, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  wk_parse_state st;
  ctrain_flag flags[WK_NFLAGS + 1];
  char **pos = NULL;
  int npos = 0;
  parse_defaults(&st);
  parse_table(flags, &st);
  pos = calloc((size_t)(argc > 0 ? argc : 1), sizeof(char *));
  if (!pos)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "out of memory");
  result = ctrain_flags_parse(flags, argc, argv, &st.o.show_help, pos, &npos, errbuf, errlen);
  parse_store(&st);
  if (result || st.o.show_help || st.o.show_version)
    goto out;
  if (st.no_overlap && st.overlap == WK_OVERLAP_ON)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--no-overlap and --overlap on: choose one");
  result = finish_command(&st.o, pos, npos, errbuf, errlen);
  if (!result)
    result = check_stream_flags(&st.o, errbuf, errlen);
  if (!result)
    result = finish_env(&st.o, errbuf, errlen);
out:
  *o = st.o;
  free(pos);
  return result;
}

void wk_options_data_format(const wk_options *o, data_format *f) {
  memset(f, 0, sizeof(*f));
  f->format = o->format;
  f->compression = o->compression;
  f->feature_image = o->feature_image;
  f->feature_label = o->feature_label;
  f->image_rank = o->image_rank;
  memcpy(f->image_shape, o->image_shape, sizeof(f->image_shape));
}
