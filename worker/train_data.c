/* train_data.c - the worker's flags into its data readers; see train_data.h. */
#include "worker/train_data.h"

#include <string.h>
#include <sys/resource.h>

#include "ctrain/log.h"

/* The streaming reader's options from the flags (s3 receives the object
 * store's settings, shared with the backups'). */
static void stream_options(const wk_options *o, const char *spec, const char *flag,
                           data_shard_policy policy, int rank, int world, data_stream_options *so,
                           s3_options *s3) {
  memset(so, 0, sizeof(*so));
  memset(s3, 0, sizeof(*s3));
  s3->endpoint = o->s3_endpoint;
  so->spec = spec;
  so->flag = flag;
  wk_options_data_format(o, &so->fmt);
  so->policy = policy;
  so->rank = rank;
  so->world = world;
  so->seed = (uint64_t)o->seed;
  so->shuffle = 1;
  so->shuffle_buffer =
      o->shuffle_buffer < 0 ? DATA_STREAM_SHUFFLE_DEFAULT : (size_t)o->shuffle_buffer;
  so->prefetch_bytes = o->prefetch ? (size_t)o->prefetch : DATA_STREAM_PREFETCH_DEFAULT;
  so->cache_dir = o->data_cache;
  so->s3 = s3;
}

ctrain_err train_data_load(const wk_options *o, const char *spec, const char *flag,
                           data_shard_policy policy, int rank, int world, data_set *ds,
                           char *errbuf, size_t errlen) {
  data_stream_options so;
  s3_options s3;
  data_format fmt;
  if (!data_spec_has_uri(spec)) {
    wk_options_data_format(o, &fmt);
    return data_load(spec, &fmt, policy, rank, world, ds, errbuf, errlen);
  }
  stream_options(o, spec, flag, policy, rank, world, &so, &s3);
  so.shuffle = 0;
  so.shuffle_buffer = 0;
  return data_stream_load(&so, ds, errbuf, errlen);
}

ctrain_err train_data_stream(const wk_options *o, int rank, int world, data_stream **out,
                             data_set *meta, char *errbuf, size_t errlen) {
  data_stream_options so;
  s3_options s3;
  stream_options(o, o->data, "--data", o->shard, rank, world, &so, &s3);
  ctrain_err result = data_stream_open(&so, out, errbuf, errlen);
  if (result)
    return result;
  memset(meta, 0, sizeof(*meta));
  data_stream_describe(*out, meta);
  LOG_INFO("--data %s: streamed, %llu records a worker-epoch; shuffle buffer %zu records, "
           "read-ahead %zu bytes%s%s",
           o->data, (unsigned long long)data_stream_count(*out), so.shuffle_buffer,
           so.prefetch_bytes, o->data_cache ? ", cache " : "", o->data_cache ? o->data_cache : "");
  return CTRAIN_OK;
}

void train_data_report(const wk_options *o, const data_stream *s) {
  struct rusage ru;
  if (!s || getrusage(RUSAGE_SELF, &ru))
    return;
  LOG_INFO("data: peak RSS %.1f MiB; reader budget %.1f MiB (prefetch %llu bytes, shuffle "
           "buffer %lld records)",
           (double)ru.ru_maxrss / 1024.0, (double)data_stream_budget_bytes(s) / (1024.0 * 1024.0),
           o->prefetch ? o->prefetch : (unsigned long long)DATA_STREAM_PREFETCH_DEFAULT,
           o->shuffle_buffer < 0 ? (long long)DATA_STREAM_SHUFFLE_DEFAULT : o->shuffle_buffer);
}
