/* safetensors.c - safetensors writer/reader for model parameters. Files are
 * written through ctrain/fileio.h (link-safe temp file, fsync, rename). */
#include "worker/checkpoint/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/fileio.h"

/* "<layer>/<part>": F32 of `shape` (rank dims), n floats at params[off]. */
static void add_tensor(cJSON *root, const model_layer *L, const char *part, const int *shape,
                       int rank, size_t off, size_t n) {
  char name[96];
  snprintf(name, sizeof(name), "%s/%s", L->name, part);
  cJSON *t = cJSON_AddObjectToObject(root, name);
  cJSON_AddStringToObject(t, "dtype", "F32");
  cJSON *sh = cJSON_AddArrayToObject(t, "shape");
  for (int d = 0; d < rank; d++)
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(shape[d]));
  cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
  cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off * 4)));
  cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)((off + n) * 4)));
}

/* Keras' names and layouts (docs/models.md): Dense kernel (in, out), Conv2D
 * kernel HWIO (kh, kw, in channels, filters), bias; BatchNormalization
 * gamma, beta, moving_mean, moving_variance. */
static cJSON *header_json(const model_t *m) {
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "ctrain");
  for (int i = 0; i < m->n_layers; i++) {
    const model_layer *L = &m->layers[i];
    size_t c = (size_t)L->c;
    if (L->kind == MODEL_DENSE) {
      add_tensor(root, L, "kernel", (int[]){L->in, L->c}, 2, L->w_off, (size_t)L->in * c);
      add_tensor(root, L, "bias", &L->c, 1, L->b_off, c);
    } else if (L->kind == MODEL_CONV2D) {
      add_tensor(root, L, "kernel", (int[]){L->kh, L->kw, L->ic, L->c}, 4, L->w_off,
                 (size_t)L->kh * L->kw * L->ic * c);
      if (L->use_bias)
        add_tensor(root, L, "bias", &L->c, 1, L->b_off, c);
    } else if (L->kind == MODEL_BATCHNORM) {
      if (L->scale)
        add_tensor(root, L, "gamma", &L->c, 1, L->gamma_off, c);
      if (L->center)
        add_tensor(root, L, "beta", &L->c, 1, L->beta_off, c);
      add_tensor(root, L, "moving_mean", &L->c, 1, L->mean_off, c);
      add_tensor(root, L, "moving_variance", &L->c, 1, L->var_off, c);
    }
  }
  return root;
}

ctrain_err safetensors_save_model(const char *dir, const model_t *m, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *root = NULL;
  char *text = NULL, path[4096];
  uint8_t *hdr = NULL;
  ctrain_file *f = NULL;
  result = ctrain_mkdir_p(dir, 0755, errbuf, errlen);
  if (result)
    goto out;
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
  result = ctrain_file_create(path, &f, errbuf, errlen);
  if (result)
    goto out;
  result = ctrain_file_write(f, hdr, 8 + padded, errbuf, errlen);
  if (result)
    goto out;
  result = ctrain_file_write(f, m->params, m->n_params * sizeof(float), errbuf, errlen);
  if (result)
    goto out;
  result = ctrain_file_commit(f, errbuf, errlen);
  f = NULL; /* taken */
  if (result)
    goto out;
  snprintf(path, sizeof(path), "%s/model.json", dir);
  result = ctrain_file_save(path, m->config_json, strlen(m->config_json), errbuf, errlen);
out:
  ctrain_file_abort(f);
  free(hdr);
  cJSON_free(text);
  cJSON_Delete(root);
  return result;
}

ctrain_err safetensors_load_params(const char *path, model_t *m, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  FILE *f = NULL;
  int fd = -1;
  char *text = NULL;
  cJSON *got = NULL, *want = NULL;
  uint8_t len8[8];
  struct stat st;
  /* The path is the user's (--weights may well be a mounted link), but it
   * must be a regular file: a FIFO would block, a device never end. */
  fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: not a regular file", path);
  f = fdopen(fd, "rb");
  if (!f)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: %s", path, strerror(errno));
  fd = -1; /* taken by f */
  uint64_t size = (uint64_t)st.st_size;
  if (fread(len8, 1, 8, f) != 8)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: truncated header", path);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++)
    hl |= (uint64_t)len8[i] << (8 * i);
  if (hl > (1u << 24) || hl > size - 8)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: header of %llu bytes in a %llu-byte file", path,
                (unsigned long long)hl, (unsigned long long)size);
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
  if (size - 8 - hl < (uint64_t)m->n_params * sizeof(float) ||
      fread(m->params, sizeof(float), m->n_params, f) != m->n_params)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: truncated data", path);
out:
  if (f)
    fclose(f);
  if (fd >= 0)
    close(fd);
  free(text);
  cJSON_Delete(got);
  cJSON_Delete(want);
  return result;
}
