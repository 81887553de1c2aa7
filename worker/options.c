/* options.c - ctrain-worker flag parsing (getopt_long). */
#include "worker/options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/log.h"

enum {
  OPT_MODEL = 256,
  OPT_DATA,
  OPT_TEST_DATA,
  OPT_FORMAT,
  OPT_SHARD,
  OPT_EPOCHS,
  OPT_BATCH,
  OPT_OPTIMIZER,
  OPT_LR,
  OPT_MOMENTUM,
  OPT_NESTEROV,
  OPT_SCALE_LR,
  OPT_WARMUP,
  OPT_SEED,
  OPT_DEVICE,
  OPT_COLLECTIVE,
  OPT_BACKUP_DIR,
  OPT_SAVE_FREQ,
  OPT_KEEP,
  OPT_KEEP_BACKUP,
  OPT_BACKUP_IGNORE_CONFIG,
  OPT_OUTPUT,
  OPT_METRICS,
  OPT_RDV_TIMEOUT,
  OPT_PEER_TIMEOUT,
  OPT_LOG_LEVEL,
  OPT_WEIGHTS,
  OPT_VERSION,
};

static const struct option long_opts[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"data", required_argument, NULL, OPT_DATA},
    {"test-data", required_argument, NULL, OPT_TEST_DATA},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"shard", required_argument, NULL, OPT_SHARD},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"lr", required_argument, NULL, OPT_LR},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"nesterov", no_argument, NULL, OPT_NESTEROV},
    {"scale-lr", no_argument, NULL, OPT_SCALE_LR},
    {"warmup-steps", required_argument, NULL, OPT_WARMUP},
    {"seed", required_argument, NULL, OPT_SEED},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"collective", required_argument, NULL, OPT_COLLECTIVE},
    {"backup-dir", required_argument, NULL, OPT_BACKUP_DIR},
    {"save-freq", required_argument, NULL, OPT_SAVE_FREQ},
    {"keep", required_argument, NULL, OPT_KEEP},
    {"keep-backup", no_argument, NULL, OPT_KEEP_BACKUP},
    {"backup-ignore-config", no_argument, NULL, OPT_BACKUP_IGNORE_CONFIG},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"rendezvous-timeout", required_argument, NULL, OPT_RDV_TIMEOUT},
    {"peer-timeout", required_argument, NULL, OPT_PEER_TIMEOUT},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"weights", required_argument, NULL, OPT_WEIGHTS},
    {"version", no_argument, NULL, OPT_VERSION},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

void wk_options_usage(FILE *f) {
  fputs("Usage: ctrain-worker train [flags]\n"
        "       ctrain-worker evaluate --model DIR|CONFIG [--weights FILE] --test-data PATH\n"
        "\n"
        "Trains a Sequential model with mirrored data parallelism across the workers\n"
        "named in TF_CONFIG (no TF_CONFIG: one local worker).\n"
        "\n"
        "Flags:\n"
        "  --model FILE                model config (JSON layer list)\n"
        "  --data PATH                 training data (IDX prefix/file or raw records)\n"
        "  --test-data PATH            evaluation data (optional)\n"
        "  --format idx|raw            data format (default idx)\n"
        "  --shard auto|file|data|off  auto-shard policy as tf.data defines it (default auto)\n"
        "  --epochs N                  epochs (default 1)\n"
        "  --batch N                   per-replica batch size (default 32)\n"
        "  --optimizer sgd|adam        optimizer (default adam)\n"
        "  --lr X                      learning rate (default 0.001)\n"
        "  --momentum X                SGD momentum (default 0)\n"
        "  --nesterov                  Nesterov momentum\n"
        "  --scale-lr                  scale lr linearly by replicas in sync\n"
        "  --warmup-steps N            linear lr warm-up steps (default 0)\n"
        "  --seed N                    seed for init, shuffling, dropout (default 42)\n"
        "  --device cpu[:R]|gpu[:R]|auto  compute device and local replicas (default auto:\n"
        "                              all visible GPUs, else cpu:1)\n"
        "  --collective ring|nccl|auto all-reduce backend (default auto)\n"
        "  --backup-dir DIR            BackupAndRestore directory (default $CTRAIN_BACKUP_DIR)\n"
        "  --save-freq epoch|N         back up each epoch or every N steps (default epoch)\n"
        "  --keep N                    backups kept (default 2)\n"
        "  --keep-backup               keep backups after success\n"
        "  --backup-ignore-config      restore even if the training config changed\n"
        "  --output DIR                final model directory\n"
        "  --weights FILE              evaluate: safetensors weights (default "
        "DIR/model.safetensors)\n"
        "  --metrics FILE              JSON-lines metrics file\n"
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

static int parse_double(const char *s, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* cpu | cpu:R | gpu | gpu:R | auto, R in 1..WK_MAX_REPLICAS. */
static int parse_device(const char *s, wk_options *o) {
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

#define BAD(...)                                                                                   \
  do {                                                                                             \
    snprintf(errbuf, errlen, __VA_ARGS__);                                                         \
    return CTRAIN_E_INVAL;                                                                         \
  } while (0)

ctrain_err wk_options_parse(wk_options *o, int argc, char **argv, char *errbuf, size_t errlen) {
  memset(o, 0, sizeof(*o));
  o->format = WK_FMT_IDX;
  o->shard = WK_SHARD_AUTO;
  o->epochs = 1;
  o->batch = 32;
  o->optimizer = "adam";
  o->lr = 0.001;
  o->seed = 42;
  o->device = WK_DEVICE_AUTO;
  o->collective = WK_COLL_AUTO;
  o->keep = 2;
  o->rendezvous_timeout = 300.0;
  o->peer_timeout = 10.0;
  o->log_level = "info";

  optind = 0;
  opterr = 0;
  long l;
  int c;
  while ((c = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    switch (c) {
    case OPT_MODEL:
      o->model = optarg;
      break;
    case OPT_DATA:
      o->data = optarg;
      break;
    case OPT_TEST_DATA:
      o->test_data = optarg;
      break;
    case OPT_FORMAT:
      if (!strcmp(optarg, "idx"))
        o->format = WK_FMT_IDX;
      else if (!strcmp(optarg, "raw"))
        o->format = WK_FMT_RAW;
      else
        BAD("--format: '%s' is not idx or raw", optarg);
      break;
    case OPT_SHARD:
      if (!strcmp(optarg, "auto"))
        o->shard = WK_SHARD_AUTO;
      else if (!strcmp(optarg, "file"))
        o->shard = WK_SHARD_FILE;
      else if (!strcmp(optarg, "data"))
        o->shard = WK_SHARD_DATA;
      else if (!strcmp(optarg, "off"))
        o->shard = WK_SHARD_OFF;
      else
        BAD("--shard: '%s' is not auto, file, data or off", optarg);
      break;
    case OPT_EPOCHS:
      if (parse_long(optarg, 1, 1000000, &l))
        BAD("--epochs: '%s' is not an integer in 1..1000000", optarg);
      o->epochs = (int)l;
      break;
    case OPT_BATCH:
      if (parse_long(optarg, 1, 1 << 20, &l))
        BAD("--batch: '%s' is not an integer in 1..1048576", optarg);
      o->batch = (int)l;
      break;
    case OPT_OPTIMIZER:
      if (strcmp(optarg, "sgd") && strcmp(optarg, "adam"))
        BAD("--optimizer: '%s' is not sgd or adam", optarg);
      o->optimizer = optarg;
      break;
    case OPT_LR:
      if (parse_double(optarg, 0.0, 1e6, &o->lr) || o->lr <= 0.0)
        BAD("--lr: '%s' is not a positive number", optarg);
      break;
    case OPT_MOMENTUM:
      if (parse_double(optarg, 0.0, 1.0, &o->momentum) || o->momentum >= 1.0)
        BAD("--momentum: '%s' is not a number in [0, 1)", optarg);
      break;
    case OPT_NESTEROV:
      o->nesterov = 1;
      break;
    case OPT_SCALE_LR:
      o->scale_lr = 1;
      break;
    case OPT_WARMUP:
      if (parse_long(optarg, 0, 1L << 30, &l))
        BAD("--warmup-steps: '%s' is not a non-negative integer", optarg);
      o->warmup_steps = (int)l;
      break;
    case OPT_SEED: {
      char *end = NULL;
      errno = 0;
      o->seed = strtoull(optarg, &end, 10);
      if (errno || end == optarg || *end || optarg[0] == '-')
        BAD("--seed: '%s' is not a non-negative integer", optarg);
      break;
    }
    case OPT_DEVICE:
      if (parse_device(optarg, o))
        BAD("--device: '%s' is not cpu, cpu:R, gpu, gpu:R or auto (R in 1..%d)", optarg,
            WK_MAX_REPLICAS);
      break;
    case OPT_COLLECTIVE:
      if (!strcmp(optarg, "ring"))
        o->collective = WK_COLL_RING;
      else if (!strcmp(optarg, "nccl"))
        o->collective = WK_COLL_NCCL;
      else if (!strcmp(optarg, "auto"))
        o->collective = WK_COLL_AUTO;
      else
        BAD("--collective: '%s' is not ring, nccl or auto", optarg);
      break;
    case OPT_BACKUP_DIR:
      o->backup_dir = optarg;
      break;
    case OPT_SAVE_FREQ:
      if (!strcmp(optarg, "epoch"))
        o->save_freq = 0;
      else if (parse_long(optarg, 1, 1L << 30, &l))
        BAD("--save-freq: '%s' is not 'epoch' or a positive step count", optarg);
      else
        o->save_freq = (int)l;
      break;
    case OPT_KEEP:
      if (parse_long(optarg, 1, 1000, &l))
        BAD("--keep: '%s' is not an integer in 1..1000", optarg);
      o->keep = (int)l;
      break;
    case OPT_KEEP_BACKUP:
      o->keep_backup = 1;
      break;
    case OPT_BACKUP_IGNORE_CONFIG:
      o->backup_ignore_config = 1;
      break;
    case OPT_OUTPUT:
      o->output = optarg;
      break;
    case OPT_METRICS:
      o->metrics = optarg;
      break;
    case OPT_RDV_TIMEOUT:
      if (parse_double(optarg, 0.001, 86400.0, &o->rendezvous_timeout))
        BAD("--rendezvous-timeout: '%s' is not a number of seconds in (0, 86400]", optarg);
      break;
    case OPT_PEER_TIMEOUT:
      if (parse_double(optarg, 0.001, 86400.0, &o->peer_timeout))
        BAD("--peer-timeout: '%s' is not a number of seconds in (0, 86400]", optarg);
      break;
    case OPT_LOG_LEVEL:
      if (ctrain_log_level_parse(optarg) < 0)
        BAD("--log-level: '%s' is not one of debug, info, warn, error", optarg);
      o->log_level = optarg;
      break;
    case OPT_VERSION:
      o->show_version = 1;
      break;
    case OPT_WEIGHTS:
      o->weights = optarg;
      break;
    case 'h':
      o->show_help = 1;
      break;
    case ':':
      BAD("%s: missing value", argv[optind - 1]);
    default:
      BAD("%s: unknown flag", argv[optind - 1]);
    }
  }
  if (o->show_help || o->show_version)
    return CTRAIN_OK;
  if (optind >= argc)
    BAD("missing command (expected 'train' or 'evaluate')");
  o->command = argv[optind];
  if (strcmp(o->command, "train") && strcmp(o->command, "evaluate"))
    BAD("unknown command '%s' (expected 'train' or 'evaluate')", o->command);
  if (!strcmp(o->command, "evaluate") && (!o->model || !o->test_data))
    BAD("evaluate needs --model (a model directory or config) and --test-data");
  if (optind + 1 < argc)
    BAD("unexpected argument '%s'", argv[optind + 1]);
  if (!o->backup_dir) {
    const char *env = getenv("CTRAIN_BACKUP_DIR");
    if (env && *env)
      o->backup_dir = env;
  }
  return CTRAIN_OK;
}
