/* options.c - ctrain-worker flag parsing (the table-driven ctrain/flags.h). */
#include "worker/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/contract.h"
#include "ctrain/flags.h"
#include "ctrain/log.h"

#define WK_TERMINATION_LOG "/dev/termination-log" /* the kubelet's default path */

void wk_options_usage(FILE *f) {
  fputs("Usage: ctrain-worker train [flags]\n"
        "       ctrain-worker evaluate --model DIR|CONFIG [--weights FILE] --test-data PATH\n"
        "\n"
        "Trains a Sequential model with mirrored data parallelism across the workers\n"
        "named in TF_CONFIG (no TF_CONFIG: one local worker).\n"
        "\n"
        "Flags:\n"
        "  --model FILE                model config: a JSON layer list or Keras model.to_json()\n"
        "  --data SPEC                 training data: an IDX prefix or images file, or (other\n"
        "                              formats) files, directories or globs, comma-separated\n"
        "  --test-data SPEC            evaluation data (optional), as --data\n"
        "  --data-format auto|idx|raw|tfrecord|numpy  data format (alias --format;\n"
        "                              default auto: tfrecord for *.tfrecord[s][.gz|.zlib],\n"
        "                              numpy for *.npy|*.npz, else idx)\n"
        "  --compression auto|none|gzip|zlib  TFRecord compression (default auto: gzip\n"
        "                              by its magic, zlib for *.zlib|*.zz, else none)\n"
        "  --feature-image NAME        TFRecord: the Example's image feature, a bytes_list\n"
        "                              of raw uint8 (scaled to [0,1]) or a float_list\n"
        "                              (default image)\n"
        "  --feature-label NAME        TFRecord: the int64_list label feature (default label)\n"
        "                              .npz: the arrays' names (default x, y); .npy: the\n"
        "                              labels file is the images file's name with the\n"
        "                              image name replaced by the label name\n"
        "  --image-shape H[,W[,C]]     TFRecord: the image's shape (required for bytes;\n"
        "                              default for floats: the list's length)\n"
        "  --shard auto|file|data|off  auto-shard policy as tf.data defines it (default auto)\n"
        "  --epochs N                  epochs (default 1)\n"
        "  --batch N                   per-replica batch size (default 32)\n"
        "  --optimizer sgd|adam        optimizer (default adam)\n"
        "  --lr X                      learning rate (default 0.001)\n"
        "  --momentum X                SGD momentum (default 0)\n"
        "  --nesterov                  Nesterov momentum\n"
        "  --scale-lr                  scale lr linearly by replicas in sync\n"
        "  --warmup-steps N            linear lr warm-up steps (default 0)\n"
        "  --lr-schedule constant|cosine\n"
        "                              after the warm-up: lr throughout, or a cosine decay\n"
        "                              from lr to 0 over the rest of the run's steps (all\n"
        "                              --epochs; Keras' CosineDecay; default constant)\n"
        "  --seed N                    seed for init, shuffling, dropout (default 42)\n"
        "  --device cpu[:R]|gpu[:R]|auto  compute device and local replicas (default auto:\n"
        "                              all visible GPUs, else cpu:1)\n"
        "  --collective ring|nccl|auto all-reduce backend (default auto)\n"
        "  --overlap auto|on|off       all-reduce the gradients in buckets during the\n"
        "                              backward pass (on) or after it (off); auto times\n"
        "                              both in the first steps and keeps the faster (the\n"
        "                              same bits any way; default auto)\n"
        "  --no-overlap                --overlap off\n"
        "  --backup-dir DIR            BackupAndRestore directory (default $CTRAIN_BACKUP_DIR)\n"
        "  --backup-uri s3://B/P|gs://B/P  backups in object storage instead (default\n"
        "                              $CTRAIN_BACKUP_URI); credentials from AWS_ACCESS_KEY_ID,\n"
        "                              AWS_SECRET_ACCESS_KEY [, AWS_SESSION_TOKEN, AWS_REGION]\n"
        "  --s3-endpoint URL           S3-compatible endpoint (default $CTRAIN_S3_ENDPOINT,\n"
        "                              else $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL)\n"
        "  --s3-max-send-rate N        cap backup uploads at N bytes/s (default 0: none)\n"
        "  --save-freq epoch|N         back up each epoch or every N steps (default epoch)\n"
        "  --keep N                    backups kept (default 2)\n"
        "  --keep-backup               keep backups after success\n"
        "  --backup-ignore-config      restore even if the training config changed\n"
        "  --output DIR                final model directory\n"
        "  --weights FILE              evaluate: safetensors weights (default "
        "DIR/model.safetensors)\n"
        "  --metrics FILE              JSON-lines metrics file\n"
        "  --tensorboard-dir DIR       chief: TensorBoard event file (scalars per epoch:\n"
        "                              loss, accuracy, val_*, learning_rate, samples/s)\n"
        "  --tensorboard-freq N        also every N global steps, into DIR/steps (batch_*\n"
        "                              tags, step = global step; default 0: epochs only)\n"
        "  --progress-port N           serve /progress (chief) and /metrics on N, bearer\n"
        "                              auth (default $CTRAIN_PROGRESS_PORT, else 0: off;\n",
        f);
  fprintf(f, "                              the controller sets %d)\n",
          CTRAIN_DEFAULT_PROGRESS_PORT);
  fputs("  --termination-log FILE      final metrics JSON ('' off; default\n"
        "                              /dev/termination-log when writable)\n"
        "  --rendezvous-timeout SEC    wait this long for peers (default 300)\n"
        "  --peer-timeout SEC          declare a silent peer lost (default 10)\n"
        "  --log-level LEVEL           debug|info|warn|error (default info)\n"
        "  --version                   print the version and exit\n"
        "  -h, --help                  print this help and exit\n"
        "\n"
        "With --backup-dir the chief resumes from the newest backup that verifies;\n"
        "SIGTERM finishes the current step, saves and exits 75.\n"
        "\n"
        "Exit codes: 0 success, 64 usage, 65 bad data, 75 retryable (peer lost,\n"
        "timeout, preempted, backup not writable), 78 bad config (also: a backup\n"
        "written for another training config).\n",
        f);
}

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

#define BAD(...)                                                                                   \
  do {                                                                                             \
    snprintf(errbuf, errlen, __VA_ARGS__);                                                         \
    return CTRAIN_E_INVAL;                                                                         \
  } while (0)

/* After the flags: the command (pos[0]) and its needs, then what the
 * environment sets when no flag did (the controller's variables). */
static ctrain_err finish(wk_options *o, char **pos, int npos, char *errbuf, size_t errlen) {
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
  static const char *const formats[] = {"idx", "raw", "tfrecord", "numpy", "auto", NULL};
  static const int format_vals[] = {DATA_FMT_IDX, DATA_FMT_RAW, DATA_FMT_TFRECORD, DATA_FMT_NUMPY,
                                    DATA_FMT_AUTO};
  static const char *const comps[] = {"auto", "none", "gzip", "zlib", NULL};
  static const int comp_vals[] = {DATA_COMP_AUTO, DATA_COMP_NONE, DATA_COMP_GZIP, DATA_COMP_ZLIB};
  static const char *const shards[] = {"auto", "file", "data", "off", NULL};
  static const int shard_vals[] = {DATA_SHARD_AUTO, DATA_SHARD_FILE, DATA_SHARD_DATA,
                                   DATA_SHARD_OFF};
  static const char *const optimizers[] = {"sgd", "adam", NULL};
  static const char *const colls[] = {"ring", "nccl", "auto", NULL};
  static const int coll_vals[] = {WK_COLL_RING, WK_COLL_NCCL, WK_COLL_AUTO};
  static const char *const scheds[] = {"constant", "cosine", NULL};
  static const int sched_vals[] = {WK_LR_CONSTANT, WK_LR_COSINE};
  int format = DATA_FMT_AUTO, comp = DATA_COMP_AUTO, shard = DATA_SHARD_AUTO, coll = WK_COLL_AUTO;
  int sched = WK_LR_CONSTANT;
  static const char *const overlaps[] = {"auto", "on", "off", NULL};
  static const int overlap_vals[] = {WK_OVERLAP_AUTO, WK_OVERLAP_ON, WK_OVERLAP_OFF};
  int overlap = WK_OVERLAP_AUTO, no_overlap = 0;
  uint64_t seed = 42, s3_max_send = 0;
  char **pos = NULL;
  int npos = 0;
  memset(o, 0, sizeof(*o));
  o->epochs = 1;
  o->batch = 32;
  o->optimizer = "adam";
  o->lr = 0.001;
  o->device = WK_DEVICE_AUTO;
  o->keep = 2;
  o->rendezvous_timeout = 300.0;
  o->peer_timeout = 10.0;
  o->log_level = "info";
  o->progress_port = -1; /* not given: the environment decides */
  const ctrain_flag flags[] = {
      {.name = "model", .kind = CTRAIN_FLAG_STRING, .dst = &o->model},
      {.name = "data", .kind = CTRAIN_FLAG_STRING, .dst = &o->data},
      {.name = "test-data", .kind = CTRAIN_FLAG_STRING, .dst = &o->test_data},
      {.name = "data-format",
       .kind = CTRAIN_FLAG_CHOICE,
       .dst = &format,
       .choices = formats,
       .values = format_vals},
      {.name = "format", /* the flag's first name, kept */
       .kind = CTRAIN_FLAG_CHOICE,
       .dst = &format,
       .choices = formats,
       .values = format_vals},
      {.name = "compression",
       .kind = CTRAIN_FLAG_CHOICE,
       .dst = &comp,
       .choices = comps,
       .values = comp_vals},
      {.name = "feature-image", .kind = CTRAIN_FLAG_STRING, .dst = &o->feature_image},
      {.name = "feature-label", .kind = CTRAIN_FLAG_STRING, .dst = &o->feature_label},
      {.name = "image-shape",
       .kind = CTRAIN_FLAG_FUNC,
       .dst = o,
       .parse = parse_shape,
       .expect = "H[,W[,C]], each in 1..65536"},
      {.name = "shard",
       .kind = CTRAIN_FLAG_CHOICE,
       .dst = &shard,
       .choices = shards,
       .values = shard_vals},
      {.name = "epochs", .kind = CTRAIN_FLAG_INT, .dst = &o->epochs, .min = 1, .max = 1000000},
      {.name = "batch", .kind = CTRAIN_FLAG_INT, .dst = &o->batch, .min = 1, .max = 1 << 20},
      {.name = "optimizer",
       .kind = CTRAIN_FLAG_CHOICE_STR,
       .dst = &o->optimizer,
       .choices = optimizers},
      {.name = "lr",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->lr,
       .min = 0,
       .max = 1e6,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "a positive number"},
      {.name = "momentum",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->momentum,
       .min = 0,
       .max = 1,
       .excl = CTRAIN_FLAG_EXCL_MAX},
      {.name = "nesterov", .kind = CTRAIN_FLAG_SET, .dst = &o->nesterov},
      {.name = "scale-lr", .kind = CTRAIN_FLAG_SET, .dst = &o->scale_lr},
      {.name = "no-overlap", .kind = CTRAIN_FLAG_SET, .dst = &no_overlap},
      {.name = "overlap",
       .kind = CTRAIN_FLAG_CHOICE,
       .dst = &overlap,
       .choices = overlaps,
       .values = overlap_vals},
      {.name = "warmup-steps",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->warmup_steps,
       .min = 0,
       .max = 1 << 30,
       .expect = "a non-negative integer"},
      {.name = "lr-schedule",
       .kind = CTRAIN_FLAG_CHOICE,
       .dst = &sched,
       .choices = scheds,
       .values = sched_vals},
      {.name = "seed", .kind = CTRAIN_FLAG_U64, .dst = &seed},
      {.name = "device",
       .kind = CTRAIN_FLAG_FUNC,
       .dst = o,
       .parse = parse_device,
       .expect = "cpu, cpu:R, gpu, gpu:R or auto (R in 1..64)"},
      {.name = "collective",
       .kind = CTRAIN_FLAG_CHOICE,
       .dst = &coll,
       .choices = colls,
       .values = coll_vals},
      {.name = "backup-dir", .kind = CTRAIN_FLAG_STRING, .dst = &o->backup_dir},
      {.name = "backup-uri", .kind = CTRAIN_FLAG_STRING, .dst = &o->backup_uri},
      {.name = "s3-endpoint", .kind = CTRAIN_FLAG_STRING, .dst = &o->s3_endpoint},
      {.name = "s3-max-send-rate", .kind = CTRAIN_FLAG_U64, .dst = &s3_max_send},
      {.name = "save-freq",
       .kind = CTRAIN_FLAG_FUNC,
       .dst = &o->save_freq,
       .parse = parse_save_freq,
       .expect = "'epoch' or a positive step count"},
      {.name = "keep", .kind = CTRAIN_FLAG_INT, .dst = &o->keep, .min = 1, .max = 1000},
      {.name = "keep-backup", .kind = CTRAIN_FLAG_SET, .dst = &o->keep_backup},
      {.name = "backup-ignore-config", .kind = CTRAIN_FLAG_SET, .dst = &o->backup_ignore_config},
      {.name = "output", .kind = CTRAIN_FLAG_STRING, .dst = &o->output},
      {.name = "metrics", .kind = CTRAIN_FLAG_STRING, .dst = &o->metrics},
      {.name = "tensorboard-dir", .kind = CTRAIN_FLAG_STRING, .dst = &o->tensorboard_dir},
      {.name = "tensorboard-freq",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->tensorboard_freq,
       .min = 0,
       .max = 1 << 30,
       .expect = "a non-negative step count (0: epochs only)"},
      {.name = "progress-port",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->progress_port,
       .min = 0,
       .max = 65535,
       .expect = "a port in 0..65535 (0: off)"},
      {.name = "termination-log", .kind = CTRAIN_FLAG_STRING, .dst = &o->termination_log},
      {.name = "rendezvous-timeout",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->rendezvous_timeout,
       .min = 0.001,
       .max = 86400,
       .expect = "a number of seconds in (0, 86400]"},
      {.name = "peer-timeout",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->peer_timeout,
       .min = 0.001,
       .max = 86400,
       .expect = "a number of seconds in (0, 86400]"},
      {.name = "log-level",
       .kind = CTRAIN_FLAG_FUNC,
       .dst = &o->log_level,
       .parse = ctrain_log_level_flag,
       .expect = CTRAIN_LOG_LEVEL_EXPECT},
      {.name = "weights", .kind = CTRAIN_FLAG_STRING, .dst = &o->weights},
      {.name = "version", .kind = CTRAIN_FLAG_SET, .dst = &o->show_version},
      {.name = NULL}};
  pos = calloc((size_t)(argc > 0 ? argc : 1), sizeof(char *));
  if (!pos)
    BAD("out of memory");
  ctrain_err result =
      ctrain_flags_parse(flags, argc, argv, &o->show_help, pos, &npos, errbuf, errlen);
  o->format = (data_file_format)format;
  o->compression = (data_compression)comp;
  o->shard = (data_shard_policy)shard;
  o->collective = (wk_collective)coll;
  o->lr_schedule = (wk_lr_schedule)sched;
  o->overlap = no_overlap ? WK_OVERLAP_OFF : (wk_overlap)overlap;
  o->seed = (unsigned long long)seed;
  o->s3_max_send = s3_max_send > (uint64_t)1 << 40 ? 1ll << 40 : (long long)s3_max_send;
  if (result || o->show_help || o->show_version)
    goto out;
  if (no_overlap && overlap == WK_OVERLAP_ON) {
    snprintf(errbuf, errlen, "--no-overlap and --overlap on: choose one");
    result = CTRAIN_E_INVAL;
    goto out;
  }
  result = finish(o, pos, npos, errbuf, errlen);
out:
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
