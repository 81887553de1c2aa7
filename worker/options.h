/* worker/options.h - ctrain-worker's command-line flags (docs/design.md "Worker contract"). */
#ifndef CTRAIN_WK_OPTIONS_H
#define CTRAIN_WK_OPTIONS_H

#include <stdio.h>

#include "ctrain/err.h"
#include "worker/data/data.h"

typedef enum { WK_DEVICE_CPU = 0, WK_DEVICE_GPU, WK_DEVICE_AUTO } wk_device;
#define WK_MAX_REPLICAS 64 /* local replicas per worker (--device cpu:R|gpu:R) */
typedef enum { WK_COLL_RING = 0, WK_COLL_NCCL, WK_COLL_AUTO } wk_collective;
typedef enum { WK_LR_CONSTANT = 0, WK_LR_COSINE } wk_lr_schedule;
/* --overlap: auto measures both ways in the first steps and keeps the faster */
typedef enum { WK_OVERLAP_AUTO = 0, WK_OVERLAP_ON, WK_OVERLAP_OFF } wk_overlap;

typedef struct {
  const char *command;          /* "train" */
  const char *model;            /* model config JSON file */
  const char *data;             /* training data path (prefix or file) */
  const char *test_data;        /* optional evaluation data */
  data_file_format format;      /* --data-format (alias --format) */
  data_compression compression; /* TFRecord: --compression */
  const char *feature_image;    /* --feature-image (default "image"; .npz "x") */
  const char *feature_label;    /* --feature-label (default "label"; .npz "y") */
  int image_rank;               /* --image-shape H,W[,C]: 0 unset */
  int image_shape[3];
  data_shard_policy shard;
  /* The streaming reader (worker/data/stream.h): on with --data-stream or an
   * object URI in --data. */
  int data_stream;
  long long shuffle_buffer;    /* records; -1: unset (DATA_STREAM_SHUFFLE_DEFAULT) */
  unsigned long long prefetch; /* --data-prefetch-bytes; 0: unset (the default) */
  const char *data_cache;      /* --data-cache DIR */
  int epochs;
  int batch;             /* per-replica batch */
  const char *optimizer; /* sgd|adam */
  double lr;
  double momentum;
  int nesterov;
  int scale_lr;       /* multiply lr by replicas in sync */
  wk_overlap overlap; /* --overlap (--no-overlap: off) */
  int warmup_steps;
  wk_lr_schedule lr_schedule; /* --lr-schedule */
  unsigned long long seed;
  wk_device device;
  int replicas; /* --device cpu:R|gpu:R; 0: unset (cpu 1, gpu all visible) */
  wk_collective collective;
  const char *backup_dir;  /* NULL: $CTRAIN_BACKUP_DIR, else none */
  const char *backup_uri;  /* s3://|gs://bucket/prefix; NULL: $CTRAIN_BACKUP_URI, else none */
  const char *s3_endpoint; /* NULL: $CTRAIN_S3_ENDPOINT, else AWS_ENDPOINT_URL[_S3] */
  long long s3_max_send;   /* upload bytes/s, 0: unlimited */
  int save_freq;           /* 0: each epoch; N > 0: every N steps */
  int keep;                /* backups kept */
  int keep_backup;
  int backup_ignore_config;
  const char *output;  /* final model directory */
  const char *weights; /* evaluate: safetensors file (default <model dir>/model.safetensors) */
  const char *metrics; /* JSON-lines metrics file */
  const char *tensorboard_dir; /* chief: TensorBoard event files */
  int tensorboard_freq;        /* also every N global steps into DIR/steps; 0: epochs only */

  /* The progress port (worker/progress.h) and the termination message. */
  int progress_port;           /* 0: off; default $CTRAIN_PROGRESS_PORT (ctrain/contract.h) */
  const char *termination_log; /* NULL: off; default /dev/termination-log when writable */

  double rendezvous_timeout; /* seconds */
  double peer_timeout;       /* seconds */
  const char *log_level;
  int show_help;
  int show_version;
} wk_options;

/* Fills `o` from argv (argv[1] is the command). CTRAIN_E_INVAL with a message
 * naming the flag in errbuf for a bad flag or value. Strings borrow argv. */
CTRAIN_NODISCARD ctrain_err wk_options_parse(wk_options *o, int argc, char **argv, char *errbuf,
                                             size_t errlen);

/* --help: the usage text, each flag's line printed from the flag table. */
void wk_options_usage(FILE *f);

/* The i-th flag --help lists (its name without "--"; metavar: what its value
 * is shown as, NULL when it takes none); NULL past the last. */
const char *wk_options_flag(size_t i, const char **metavar);

/* Whether the training data goes through the streaming reader. */
int wk_options_streaming(const wk_options *o);

/* The data_format (worker/data/data.h) the flags in `o` ask for. */
void wk_options_data_format(const wk_options *o, data_format *f);

#endif
