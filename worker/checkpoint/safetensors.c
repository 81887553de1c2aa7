/* safetensors.c - safetensors writer/reader for model parameters. */
#include "ctrain/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes buf to path atomically: temp file, fsync, rename. */
static ctrain_err write_atomic(const char *path, const void *a, size_t alen, const void *b,
                               size_t blen, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char tmp[4096];
  FILE *f = NULL;
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  f = fopen(tmp, "wb");
  if (!f)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: %s", tmp, strerror(errno));
  if (fwrite(a, 1, alen, f) != alen || (blen && fwrite(b, 1, blen, f) != blen) || fflush(f) ||
      fsync(fileno(f)))
    CTRAIN_FAIL(errno == ENOSPC ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "%s: write: %s", tmp,
                strerror(errno));
  if (fclose(f)) {
    f = NULL;
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: close: %s", tmp, strerror(errno));
  }
  f = NULL;
  if (rename(tmp, path))
    CTRAIN_FAIL(CTRAIN_E_IO, "rename %s -> %s: %s", tmp, path, strerror(errno));
out:
  if (f)
    fclose(f);
  if (result)
    unlink(tmp);
  return result;
}

static cJSON *header_json(const model_t *m) {
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "ctrain");
  for (int i = 0; i < m->n_layers; i++) {
    const model_layer *L = &m->layers[i];
    if (L->kind != MODEL_DENSE)
      continue;
    for (int part = 0; part < 2; part++) {
      char name[96];
      snprintf(name, sizeof(name), "%s/%s", L->name, part ? "bias" : "kernel");
      cJSON *t = cJSON_AddObjectToObject(root, name);
      cJSON_AddStringToObject(t, "dtype", "F32");
      cJSON *shape = cJSON_AddArrayToObject(t, "shape");
      if (!part)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(L->in));
      cJSON_AddItemToArray(shape, cJSON_CreateNumber(L->out));
      size_t off = part ? L->b_off : L->w_off, n = part ? (size_t)L->out : L->b_off - L->w_off;
      cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
      cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off * 4)));
      cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)((off + n) * 4)));
    }
  }
  return root;
}

ctrain_err st_save_model(const char *dir, const model_t *m, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *root = NULL;
  char *text = NULL, path[4096];
  uint8_t *hdr = NULL;
  if (mkdir(dir, 0755) && errno != EEXIST)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: mkdir: %s", dir, strerror(errno));
  root = header_json(m);
  text = root ? cJSON_PrintUnformatted(root) : NULL;
  if (!text)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "safetensors: out of memory");
  size_t tl = strlen(text), padded = (tl + 7) & ~(size_t)7;
  hdr = malloc(8 + padded);
  if (!hdr)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "safetensors: out of memory");
  for (int i = 0; i < 8; i++)
    hdr[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  memcpy(hdr + 8, text, tl);
  memset(hdr + 8 + tl, ' ', padded - tl);
  /* Parameters are little-endian float32 in memory on every target we build. */
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  result =
      write_atomic(path, hdr, 8 + padded, m->params, m->n_params * sizeof(float), errbuf, errlen);
  if (result)
    goto out;
  snprintf(path, sizeof(path), "%s/model.json", dir);
  result = write_atomic(path, m->config_json, strlen(m->config_json), NULL, 0, errbuf, errlen);
out:
  free(hdr);
  cJSON_free(text);
  cJSON_Delete(root);
  return result;
}

ctrain_err st_load_params(const char *path, model_t *m, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  FILE *f = NULL;
  char *text = NULL;
  cJSON *got = NULL, *want = NULL;
  uint8_t len8[8];
  f = fopen(path, "rb");
  if (!f)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: %s", path, strerror(errno));
  if (fread(len8, 1, 8, f) != 8)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: truncated header", path);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++)
    hl |= (uint64_t)len8[i] << (8 * i);
  if (hl > (1u << 24))
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: header of %llu bytes", path, (unsigned long long)hl);
  text = malloc(hl + 1);
  if (!text || fread(text, 1, hl, f) != hl)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: truncated header", path);
  text[hl] = 0;
  got = cJSON_Parse(text);
  want = header_json(m);
  cJSON_DeleteItemFromObject(got, "__metadata__");
  cJSON_DeleteItemFromObject(want, "__metadata__");
  if (!got || !cJSON_Compare(got, want, 1))
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: tensors do not match the model config", path);
  if (fread(m->params, sizeof(float), m->n_params, f) != m->n_params)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: truncated data", path);
out:
  if (f)
    fclose(f);
  free(text);
  cJSON_Delete(got);
  cJSON_Delete(want);
  return result;
}
