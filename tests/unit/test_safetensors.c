/* test_safetensors.c - the model writer and reader (safetensors.h): the
 * model's files go through common's shared-storage writer (links planted at
 * every temp name and at the targets are never followed), and the reader
 * refuses FIFOs, directories, truncated files and lying headers. */
#include "test.h"
#include "test_fs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "ctrain/fileio.h"
#include "worker/checkpoint/safetensors.h"
#include "worker/model/model.h"

static model_t *small_model(void) {
  model_t *m = NULL;
  char err[256] = "";
  ctrain_err r = model_from_json("{\"input_shape\":[4],\"layers\":["
                                 "{\"type\":\"Dense\",\"units\":3,\"activation\":\"relu\"},"
                                 "{\"type\":\"Dense\",\"units\":2}]}",
                                 &m, err, sizeof(err));
  if (r)
    TEST_FAIL_("model_from_json: %s", err);
  model_init(m, 1);
  return m;
}

/* The model writer's files: the temp names today's code and the old one
 * use, and the targets themselves, all links to files elsewhere. */
TEST(model_writer_does_not_follow_planted_links) {
  char dir[64], outside[64], path[256], victim[256], err[512] = "";
  const char *names[] = {"model.safetensors", "model.json"};
  model_t *m = small_model();
  fs_make_dir(dir, sizeof(dir), "test_safetensors");
  fs_make_dir(outside, sizeof(outside), "test_safetensors");
  g_nonce = 1;
  ctrain_file_set_nonce_source(counting_nonce, NULL);
  for (int k = 0; k < 2; k++) {
    /* The old writer's `<name>.tmp.<pid>`. */
    snprintf(path, sizeof(path), "%s/%s.tmp.%d", dir, names[k], (int)getpid());
    snprintf(victim, sizeof(victim), "%s/pid-victim-%d", outside, k);
    fs_put_file(victim, "precious");
    ASSERT_OK(symlink(victim, path));
    snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
    snprintf(victim, sizeof(victim), "%s/target-victim-%d", outside, k);
    fs_put_file(victim, "precious");
    ASSERT_OK(symlink(victim, path));
    /* Each file's writer tries nonces from 1 (the safetensors one takes
     * them up to TRIES, model.json's start after it). */
    plant_temp_links(path, outside, k ? CTRAIN_FILE_TEMP_TRIES + 1 : 1, CTRAIN_FILE_TEMP_TRIES - 1);
  }
  ASSERT_OK(safetensors_save_model(dir, m, err, sizeof(err)));
  for (int k = 0; k < 2; k++) {
    snprintf(victim, sizeof(victim), "%s/pid-victim-%d", outside, k);
    ASSERT_STR_EQ(fs_slurp(victim), "precious");
    snprintf(victim, sizeof(victim), "%s/target-victim-%d", outside, k);
    ASSERT_STR_EQ(fs_slurp(victim), "precious");
    snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
    check_victims(path, outside, CTRAIN_FILE_TEMP_TRIES - 1);
    ASSERT(is_regular(path));
  }
  ctrain_file_set_nonce_source(NULL, NULL);
  snprintf(path, sizeof(path), "%s/model.json", dir);
  ASSERT_STR_EQ(fs_slurp(path), m->config_json);
  /* What was written reads back. */
  model_t *back = small_model();
  memset(back->params, 0, back->n_params * sizeof(float));
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  ASSERT_OK(safetensors_load_params(path, back, err, sizeof(err)));
  ASSERT_OK(memcmp(back->params, m->params, m->n_params * sizeof(float)));
  model_free(back);
  model_free(m);
  fs_rm_rf(dir);
  fs_rm_rf(outside);
}

TEST(model_reader_refuses_fifos_and_short_files) {
  char dir[64], path[256], err[512] = "";
  model_t *m = small_model();
  fs_make_dir(dir, sizeof(dir), "test_safetensors");
  ASSERT_OK(safetensors_save_model(dir, m, err, sizeof(err)));
  alarm(5);
  snprintf(path, sizeof(path), "%s/fifo.safetensors", dir);
  ASSERT_OK(mkfifo(path, 0644));
  ASSERT_EQ(safetensors_load_params(path, m, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "not a regular file");
  alarm(0);
  ASSERT_EQ(safetensors_load_params(dir, m, err, sizeof(err)), CTRAIN_E_IO);
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  struct stat st;
  ASSERT_OK(stat(path, &st));
  ASSERT_OK(truncate(path, st.st_size - 1));
  ASSERT_EQ(safetensors_load_params(path, m, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "truncated data");
  /* A header length past the end of the file is refused before any read. */
  int fd = open(path, O_WRONLY);
  ASSERT(fd >= 0);
  uint8_t len8[8] = {0xf0, 0xff, 0xff, 0, 0, 0, 0, 0};
  ASSERT_EQ(pwrite(fd, len8, 8, 0), 8);
  close(fd);
  ASSERT_EQ(safetensors_load_params(path, m, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "header of");
  model_free(m);
  fs_rm_rf(dir);
}

/* The header of dir/model.safetensors, parsed (owned by the caller). */
static cJSON *read_header(const char *dir) {
  char path[256];
  uint8_t len8[8];
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  FILE *f = fopen(path, "rb");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fread(len8, 1, 8, f), 8);
  size_t hl = 0;
  for (int i = 0; i < 8; i++)
    hl |= (size_t)len8[i] << (8 * i);
  char *text = calloc(hl + 1, 1);
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(fread(text, 1, hl, f), hl);
  fclose(f);
  cJSON *h = cJSON_Parse(text);
  ASSERT_NOT_NULL(h);
  free(text);
  return h;
}

/* The tensor `name`'s shape is want (rank dims) and its data is params[off..]. */
static void expect_tensor(const cJSON *h, const char *name, const int *want, int rank, size_t off) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, name);
  if (!t)
    TEST_FAIL_("no tensor %s", name);
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
  ASSERT_EQ(cJSON_GetArraySize(shape), rank);
  for (int d = 0; d < rank; d++)
    ASSERT_EQ(cJSON_GetArrayItem(shape, d)->valueint, want[d]);
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
  ASSERT_EQ((size_t)cJSON_GetArrayItem(offs, 0)->valuedouble, off * 4);
}

/* A CNN as Keras names and lays out its weights: Conv2D kernel HWIO,
 * BatchNormalization's four vectors; the file reads back bit for bit. */
TEST(cnn_tensors_use_keras_names_and_layouts) {
  char dir[64], path[256], err[512] = "";
  model_t *m = NULL;
  ASSERT_OK(
      model_load_file(CTRAIN_SOURCE_DIR "/tests/data/keras/cnn-keras3.json", &m, err, sizeof(err)));
  model_init(m, 3);
  for (size_t k = 0; k < m->n_params; k++)
    m->params[k] += (float)k * 1e-6f;
  fs_make_dir(dir, sizeof(dir), "test_safetensors");
  ASSERT_OK(safetensors_save_model(dir, m, err, sizeof(err)));
  cJSON *h = read_header(dir);
  const model_layer *conv = &m->layers[0], *bn = &m->layers[4];
  expect_tensor(h, "conv2d/kernel", (int[]){3, 3, 1, 32}, 4, conv->w_off);
  expect_tensor(h, "conv2d/bias", (int[]){32}, 1, conv->b_off);
  expect_tensor(h, "conv2d_1/kernel", (int[]){3, 3, 32, 64}, 4, m->layers[3].w_off);
  expect_tensor(h, "batch_normalization_1/gamma", (int[]){64}, 1, bn->gamma_off);
  expect_tensor(h, "batch_normalization_1/beta", (int[]){64}, 1, bn->beta_off);
  expect_tensor(h, "batch_normalization_1/moving_mean", (int[]){64}, 1, bn->mean_off);
  expect_tensor(h, "batch_normalization_1/moving_variance", (int[]){64}, 1, bn->var_off);
  expect_tensor(h, "dense/kernel", (int[]){3136, 128}, 2, m->layers[8].w_off);
  ASSERT_EQ(cJSON_GetArraySize(h), 1 + 2 + 4 + 2 + 4 + 2 + 2); /* + __metadata__ */
  cJSON_Delete(h);
  float *want = malloc(m->n_params * sizeof(float));
  ASSERT_NOT_NULL(want);
  memcpy(want, m->params, m->n_params * sizeof(float));
  memset(m->params, 0, m->n_params * sizeof(float));
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  ASSERT_OK(safetensors_load_params(path, m, err, sizeof(err)));
  ASSERT_EQ(memcmp(want, m->params, m->n_params * sizeof(float)), 0);
  free(want);
  model_free(m);
  fs_rm_rf(dir);
}

TEST_MAIN(T(model_writer_does_not_follow_planted_links),
          T(model_reader_refuses_fifos_and_short_files), T(cnn_tensors_use_keras_names_and_layouts))
