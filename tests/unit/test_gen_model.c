/* test_gen_model.c - synthetic GGUF models: presets, round trips through the
 * reader for every type, weights regenerated independently from the seed,
 * the vocabulary's SentencePiece shape, validation, and the CLI. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "host/src/gguf.h"
#include "host/src/model_file.h"
#include "tsr_test.h"

/* ---- the generator's recipe, restated (see gen_model.c) ---- */

static uint64_t fnv1a64(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

typedef struct stream {
  uint64_t s;
  float scale;
} stream_t;

static stream_t stream_for(const char *name, uint64_t seed, int64_t fan_in) {
  stream_t st = {seed ^ fnv1a64(name), sqrtf(3.0f / (float)fan_in)};
  return st;
}

static float next_weight(stream_t *st) {
  return ((float)(tsr_test_splitmix64(&st->s) >> 40) * 0x1p-24f * 2.0f - 1.0f) * st->scale;
}

/* Checks every element of `v` (tensor `name`) against the recipe. Returns
 * the number of mismatches. */
static long check_tensor(const char *name, const tsr_tensor_view_t *v, uint64_t seed, bool norm,
                         tsr_dtype_t want_type) {
  long bad = 0;
  if (v->type != want_type) {
    fprintf(stderr, "%s: type %s, expected %s\n", name, tsr_dtype_name(v->type),
            tsr_dtype_name(want_type));
    return 1;
  }
  stream_t st = stream_for(name, seed, v->cols);
  const uint8_t *p = v->data;
  float block[32];
  for (int64_t r = 0; r < v->rows; r++) {
    for (int64_t c = 0; c < v->cols; c++) {
      const float x = norm ? 1.0f : next_weight(&st);
      const int64_t i = r * v->cols + c;
      if (v->type == TSR_DTYPE_F32) {
        float got;
        memcpy(&got, p + 4 * i, 4);
        bad += got != x;
      } else if (v->type == TSR_DTYPE_F16) {
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        bad += tsr_f16_to_f32(h) != tsr_f16_to_f32(tsr_f32_to_f16(x));
      } else if (v->type == TSR_DTYPE_BF16) {
        /* the conversion itself is checked against its definition in
         * test_hgemm */
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        bad += h != tsr_f32_to_bf16(x);
      } else {
        /* Q8_0: check a whole block once its 32 values are known. */
        block[i % 32] = x;
        if (i % 32 != 31) continue;
        const uint8_t *b = p + (i / 32) * 34;
        float amax = 0.0f;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(block[k]));
        const float d = tsr_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
        bad += d != tsr_f16_to_f32(tsr_f32_to_f16(amax / 127.0f));
        for (int k = 0; k < 32; k++) {
          const float deq = (float)(int8_t)b[2 + k] * d;
          /* Half a step, plus the fp16 rounding of d times 127. */
          bad += fabsf(deq - block[k]) > 0.5f * d + 127.0f * d * 0x1p-11f + 1e-7f;
        }
      }
    }
  }
  if (bad) fprintf(stderr, "%s: %ld mismatches\n", name, bad);
  return bad;
}

static int strcmp_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *tmp_path(const char *file) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", tsr_test_tmpdir(), file);
  return buf;
}

/* Generates `p`, loads it back and checks config, table, weights, vocab. */
static void round_trip(const tsr_gen_params_t *p) {
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("rt.gguf"));
  TSR_ASSERT_OK(tsr_gen_model_write(path, p));
  tsr_model_file_t *mf = NULL;
  TSR_ASSERT_OK(tsr_model_file_open(path, NULL, &mf));
  CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
  const tsr_model_config_t *c = &mf->config;
  CU_ASSERT_EQUAL(c->dim, p->dim);
  CU_ASSERT_EQUAL(c->hidden_dim, p->hidden_dim);
  CU_ASSERT_EQUAL(c->n_layers, p->n_layers);
  CU_ASSERT_EQUAL(c->n_heads, p->n_heads);
  CU_ASSERT_EQUAL(c->n_kv_heads, p->n_kv_heads);
  CU_ASSERT_EQUAL(c->vocab_size, p->vocab_size);
  CU_ASSERT_EQUAL(c->seq_len, p->seq_len);
  CU_ASSERT_EQUAL(c->head_dim, p->dim / p->n_heads);
  CU_ASSERT_EQUAL(c->rms_eps, 1e-5f);
  CU_ASSERT_EQUAL(c->rope_theta, 10000.0f);
  CU_ASSERT_TRUE(c->shared_classifier);
  CU_ASSERT_EQUAL(mf->gguf_version, 3);
  CU_ASSERT_EQUAL(mf->gguf_alignment, 32);
  CU_ASSERT_EQUAL(mf->n_tensors, 2 + 9 * p->n_layers);
  for (int i = 0; i < mf->n_tensors; i++) {
    CU_ASSERT_EQUAL(mf->tensors[i].offset % 32, 0);
    CU_ASSERT_TRUE(mf->tensors[i].offset + mf->tensors[i].nbytes <= mf->file.size);
  }
  const int64_t kv_dim = (int64_t)p->n_kv_heads * (p->dim / p->n_heads);
  CU_ASSERT_EQUAL(mf->layers[0].wk.rows, kv_dim);
  CU_ASSERT_EQUAL(mf->layers[0].w2.cols, p->hidden_dim);

  /* Weights: 2-D in the asked type (Q8_0 falls back to F16 for rows that
   * are not whole blocks), norms F32. */
  const uint64_t seed = p->seed;
#define WANT(cols) \
  (p->type == TSR_DTYPE_Q8_0 && (cols) % 32 ? TSR_DTYPE_F16 : p->type)
  long bad = check_tensor("token_embd.weight", &mf->tok_embd, seed, false, WANT(p->dim));
  bad += check_tensor("output_norm.weight", &mf->rms_final, seed, true, TSR_DTYPE_F32);
  for (int l = 0; l < p->n_layers; l++) {
    const tsr_layer_views_t *ly = &mf->layers[l];
    struct {
      const char *suffix;
      const tsr_tensor_view_t *v;
      bool norm;
    } ts[] = {{"attn_norm", &ly->rms_att, true}, {"attn_q", &ly->wq, false},
              {"attn_k", &ly->wk, false},        {"attn_v", &ly->wv, false},
              {"attn_output", &ly->wo, false},   {"ffn_norm", &ly->rms_ffn, true},
              {"ffn_gate", &ly->w1, false},      {"ffn_down", &ly->w2, false},
              {"ffn_up", &ly->w3, false}};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
      char name[64];
      snprintf(name, sizeof name, "blk.%d.%s.weight", l, ts[i].suffix);
      bad += check_tensor(name, ts[i].v, seed, ts[i].norm,
                          ts[i].norm ? TSR_DTYPE_F32 : WANT(ts[i].v->cols));
    }
  }
#undef WANT
  CU_ASSERT_EQUAL(bad, 0);

  /* Vocabulary: llama's layout, unique pieces, decreasing merge scores. */
  const tsr_vocab_t *v = &mf->vocab;
  CU_ASSERT_EQUAL_FATAL(v->n, p->vocab_size);
  CU_ASSERT_STRING_EQUAL(v->pieces[0], "<unk>");
  CU_ASSERT_STRING_EQUAL(v->pieces[1], "\n<s>\n");
  CU_ASSERT_STRING_EQUAL(v->pieces[2], "\n</s>\n");
  CU_ASSERT_EQUAL(v->bos, 1);
  CU_ASSERT_EQUAL(v->eos, 2);
  CU_ASSERT_EQUAL(v->unk, 0);
  int byte_bad = 0;
  for (int i = 0; i < 256; i++) {
    char want[8];
    snprintf(want, sizeof want, "<0x%02X>", i);
    byte_bad += strcmp(v->pieces[3 + i], want) != 0;
  }
  CU_ASSERT_EQUAL(byte_bad, 0);
  if (v->n > 259) CU_ASSERT_STRING_EQUAL(v->pieces[259], " ");
  int score_bad = 0;
  for (int i = 260; i < v->n; i++) score_bad += !(v->scores[i] < v->scores[i - 1]);
  CU_ASSERT_EQUAL(score_bad, 0);
  char **sorted = malloc((size_t)v->n * sizeof *sorted);
  memcpy(sorted, v->pieces, (size_t)v->n * sizeof *sorted);
  qsort(sorted, (size_t)v->n, sizeof *sorted, strcmp_ptr);
  int dups = 0;
  for (int i = 1; i < v->n; i++) dups += strcmp(sorted[i - 1], sorted[i]) == 0;
  CU_ASSERT_EQUAL(dups, 0);
  /* BPE reachability: every merged piece splits into two pieces. */
  int unreachable = 0;
  for (int i = 259; i < v->n; i++) {
    const char *s = v->pieces[i];
    size_t n = strlen(s);
    if (n < 2) continue;
    bool found = false;
    for (size_t k = 1; k < n && !found; k++) {
      char a[64], b[64];
      if (k >= sizeof a || n - k >= sizeof b) continue;
      memcpy(a, s, k);
      a[k] = 0;
      memcpy(b, s + k, n - k + 1);
      const char *pa = a, *pb = b;
      found = bsearch(&pa, sorted, (size_t)v->n, sizeof *sorted, strcmp_ptr) &&
              bsearch(&pb, sorted, (size_t)v->n, sizeof *sorted, strcmp_ptr);
    }
    unreachable += !found;
  }
  CU_ASSERT_EQUAL(unreachable, 0);
  free(sorted);
  tsr_model_file_close(mf);
  remove(path);
}

/* ---- tests ---- */

static void test_presets(void) {
  const char *names[] = {"stories260K", "stories15M", "stories110M", "large"};
  const int32_t dims[] = {64, 288, 768, 2048};
  for (int i = 0; i < 4; i++) {
    tsr_gen_params_t p;
    TSR_ASSERT_OK(tsr_gen_preset(names[i], &p));
    CU_ASSERT_EQUAL(p.dim, dims[i]);
    CU_ASSERT_STRING_EQUAL(p.preset, names[i]);
    CU_ASSERT_EQUAL(p.type, TSR_DTYPE_F32);
  }
  tsr_gen_params_t p;
  TSR_ASSERT_OK(tsr_gen_preset("stories260K", &p));
  CU_ASSERT_EQUAL(p.hidden_dim, 172);
  CU_ASSERT_EQUAL(p.n_layers, 5);
  CU_ASSERT_EQUAL(p.n_heads, 8);
  CU_ASSERT_EQUAL(p.n_kv_heads, 4);
  CU_ASSERT_EQUAL(p.vocab_size, 512);
  CU_ASSERT_EQUAL(p.seq_len, 512);
  TSR_ASSERT_ERR(tsr_gen_preset("stories1B", &p), TSR_STATUS_NOT_FOUND,
                 "unknown preset 'stories1B' (known: stories260K, stories15M");
}

static void test_f16_conversion(void) {
  CU_ASSERT_EQUAL(tsr_f32_to_f16(1.0f), 0x3c00);
  CU_ASSERT_EQUAL(tsr_f32_to_f16(-2.0f), 0xc000);
  CU_ASSERT_EQUAL(tsr_f32_to_f16(65504.0f), 0x7bff);
  CU_ASSERT_EQUAL(tsr_f32_to_f16(65520.0f), 0x7c00); /* rounds up to inf */
  CU_ASSERT_EQUAL(tsr_f32_to_f16(0x1p-24f), 0x0001); /* smallest subnormal */
  CU_ASSERT_EQUAL(tsr_f32_to_f16(0x1p-26f), 0x0000);
  CU_ASSERT_EQUAL(tsr_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
  CU_ASSERT_EQUAL(tsr_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  CU_ASSERT_EQUAL(tsr_f16_to_f32(0x3555), 0x1.554p-2f);
  CU_ASSERT_EQUAL(tsr_f16_to_f32(0x0200), 0x1p-15f);
  /* Every finite half survives the round trip. */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN */
    bad += tsr_f32_to_f16(tsr_f16_to_f32((uint16_t)h)) != h;
  }
  CU_ASSERT_EQUAL(bad, 0);
}

static void test_round_trip_small(void) {
  const tsr_dtype_t types[] = {TSR_DTYPE_F32, TSR_DTYPE_F16, TSR_DTYPE_BF16, TSR_DTYPE_Q8_0};
  for (int t = 0; t < 4; t++) {
    tsr_gen_params_t p;
    TSR_ASSERT_OK(tsr_gen_preset("stories260K", &p));
    p.type = types[t];
    p.seed = 7 + (uint64_t)t;
    round_trip(&p);
  }
  /* Explicit sizes override a preset (and hit other head layouts). */
  tsr_gen_params_t p;
  TSR_ASSERT_OK(tsr_gen_preset("stories260K", &p));
  p.dim = 96, p.hidden_dim = 256, p.n_layers = 1, p.n_heads = 6, p.n_kv_heads = 2;
  p.vocab_size = 300, p.seq_len = 64, p.type = TSR_DTYPE_Q8_0;
  round_trip(&p);
  p.vocab_size = 259; /* no merges at all */
  p.type = TSR_DTYPE_F16;
  round_trip(&p);
}

static void test_round_trip_stories15M(void) {
  const tsr_dtype_t types[] = {TSR_DTYPE_F32, TSR_DTYPE_F16, TSR_DTYPE_BF16, TSR_DTYPE_Q8_0};
  for (int t = 0; t < 4; t++) {
    tsr_gen_params_t p;
    TSR_ASSERT_OK(tsr_gen_preset("stories15M", &p));
    p.type = types[t];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    TSR_ASSERT_OK(tsr_gen_model_write(tmp_path("timing.gguf"), &p));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("REPORT gen-model stories15M %s: %.2f s\n", tsr_dtype_name(p.type), secs);
    CU_ASSERT_TRUE(secs < 10.0);
    remove(tmp_path("timing.gguf"));
    round_trip(&p);
  }
}

static uint8_t *slurp(const char *path, size_t *size) {
  tsr_mapped_file_t f;
  tsr_status_t s = tsr_file_map(path, &f);
  if (s) {
    tsr_status_free(s);
    return NULL;
  }
  uint8_t *copy = malloc(f.size);
  memcpy(copy, f.data, f.size);
  *size = f.size;
  tsr_file_unmap(&f);
  return copy;
}

static void test_deterministic(void) {
  tsr_gen_params_t p;
  TSR_ASSERT_OK(tsr_gen_preset("stories260K", &p));
  char a[512], b[512];
  snprintf(a, sizeof a, "%s", tmp_path("a.gguf"));
  snprintf(b, sizeof b, "%s", tmp_path("b.gguf"));
  TSR_ASSERT_OK(tsr_gen_model_write(a, &p));
  TSR_ASSERT_OK(tsr_gen_model_write(b, &p));
  size_t na = 0, nb = 0;
  uint8_t *da = slurp(a, &na), *db = slurp(b, &nb);
  CU_ASSERT_PTR_NOT_NULL_FATAL(da);
  CU_ASSERT_PTR_NOT_NULL_FATAL(db);
  CU_ASSERT_EQUAL(na, nb);
  CU_ASSERT_TRUE(na == nb && memcmp(da, db, na) == 0);
  free(db);
  p.seed += 1;
  TSR_ASSERT_OK(tsr_gen_model_write(b, &p));
  db = slurp(b, &nb);
  CU_ASSERT_EQUAL(na, nb); /* same layout, other weights */
  CU_ASSERT_TRUE(na == nb && memcmp(da, db, na) != 0);
  free(da);
  free(db);
  remove(a);
  remove(b);
}

static void test_validation(void) {
  tsr_gen_params_t p, q;
  TSR_ASSERT_OK(tsr_gen_preset("stories260K", &p));
  const char *path = tmp_path("bad.gguf");
  q = p, q.n_heads = 7;
  TSR_ASSERT_ERR(tsr_gen_model_write(path, &q), TSR_STATUS_FORMAT, "n_heads 7");
  q = p, q.n_kv_heads = 3;
  TSR_ASSERT_ERR(tsr_gen_model_write(path, &q), TSR_STATUS_FORMAT, "n_kv_heads 3");
  q = p, q.dim = 0;
  TSR_ASSERT_ERR(tsr_gen_model_write(path, &q), TSR_STATUS_OUT_OF_RANGE, "dim = 0");
  q = p, q.vocab_size = 100;
  TSR_ASSERT_ERR(tsr_gen_model_write(path, &q), TSR_STATUS_OUT_OF_RANGE, "vocab_size = 100");
  q = p, q.type = (tsr_dtype_t)2;
  TSR_ASSERT_ERR(tsr_gen_model_write(path, &q), TSR_STATUS_INVALID_ARGUMENT, "type 2");
  struct stat st;
  CU_ASSERT_NOT_EQUAL(stat(path, &st), 0); /* nothing written */
  TSR_ASSERT_ERR(tsr_gen_model_write("build/no/such/dir/m.gguf", &p), TSR_STATUS_IO,
                 "build/no/such/dir/m.gguf");
}

static int run(const char *cmd) {
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli(void) {
  char bin[256];
  snprintf(bin, sizeof bin, "%s", tsr_test_build_path("bin/tessera"));
  struct stat st;
  if (stat(bin, &st) != 0) {
    tsr_test_skip("%s is not built", bin);
    return;
  }
  char cmd[2048];
  const char *out = tmp_path("cli.gguf");
  snprintf(cmd, sizeof cmd, "%s gen-model --help > /dev/null", bin);
  CU_ASSERT_EQUAL(run(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s info --help > /dev/null", bin);
  CU_ASSERT_EQUAL(run(cmd), 0);
  const char *bad[] = {"--preset nope", "--preset stories260K --dim 100",
                       "--preset stories260K --type q4_0", "--preset stories260K --vocab 10",
                       "--preset stories260K --heads x", "--preset stories260K --seed -1",
                       "--preset stories260K --bogus 1", "--preset stories260K --layers"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(cmd, sizeof cmd, "%s gen-model -o %s %s 2> /dev/null", bin, out, bad[i]);
    CU_ASSERT_EQUAL(run(cmd), 2);
    if (run(cmd) != 2) fprintf(stderr, "expected exit 2: %s\n", cmd);
  }
  snprintf(cmd, sizeof cmd, "%s gen-model 2> /dev/null", bin);
  CU_ASSERT_EQUAL(run(cmd), 2);
  snprintf(cmd, sizeof cmd,
           "%s gen-model -o %s --preset stories260K --type q8_0 --seed 5 --layers 2 > /dev/null",
           bin, out);
  CU_ASSERT_EQUAL(run(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s info -m %s | grep -q 'blk.1.ffn_up.weight  *Q8_0'", bin, out);
  CU_ASSERT_EQUAL(run(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s info -m %s | grep -q '^n_layers: *2$'", bin, out);
  CU_ASSERT_EQUAL(run(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s info -m build/no-such.gguf 2> /dev/null", bin);
  CU_ASSERT_EQUAL(run(cmd), 1);
  snprintf(cmd, sizeof cmd, "%s info 2> /dev/null", bin);
  CU_ASSERT_EQUAL(run(cmd), 2);
  remove(out);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("gen_model", NULL, NULL);
  CU_add_test(s, "presets", test_presets);
  CU_add_test(s, "fp16 conversion", test_f16_conversion);
  CU_add_test(s, "round trip: stories260K x {F32, F16, Q8_0}, overrides",
              test_round_trip_small);
  CU_add_test(s, "round trip: stories15M x {F32, F16, Q8_0}", test_round_trip_stories15M);
  CU_add_test(s, "same seed, same bytes", test_deterministic);
  CU_add_test(s, "parameter validation", test_validation);
  CU_add_test(s, "tessera gen-model / info", test_cli);
  return tsr_test_run_all();
}
