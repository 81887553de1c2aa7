/* worker/train_data.h - the worker's flags into its data readers: the
 * in-memory one (worker/data/data.h) or the streaming one
 * (worker/data/stream.h), and the memory report of a streamed run. */
#ifndef CTRAIN_WORKER_TRAIN_DATA_H
#define CTRAIN_WORKER_TRAIN_DATA_H

#include <stddef.h>

#include "ctrain/err.h"
#include "worker/data/data.h"
#include "worker/data/stream.h"
#include "worker/options.h"

/* An evaluation set (--test-data, spec) whole in memory, this worker's
 * `policy` shard of it: through the streaming reader when the spec names
 * objects, else data_load. `flag` names it in messages. */
CTRAIN_NODISCARD ctrain_err train_data_load(const wk_options *o, const char *spec, const char *flag,
                                            data_shard_policy policy, int rank, int world,
                                            data_set *ds, char *errbuf, size_t errlen);

/* The training data (--data) as a stream for worker rank of world (records
 * counted); `meta` receives its description (no arrays). *out owned by the
 * caller (data_stream_free). */
CTRAIN_NODISCARD ctrain_err train_data_stream(const wk_options *o, int rank, int world,
                                              data_stream **out, data_set *meta, char *errbuf,
                                              size_t errlen);

/* One line at the end of a streamed run: the process's peak RSS beside the
 * reader's budget and settings ("data: peak RSS ..."). */
void train_data_report(const wk_options *o, const data_stream *s);

#endif
