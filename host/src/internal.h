/*
 * internal.h - the objects behind the public handles.
 *
 * Internal header shared by context.c, model.c, forward.c, tokenizer.c and
 * sampler.c. Shape comments give (rows, cols) of row-major arrays.
 */
#ifndef TSR_INTERNAL_H
#define TSR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "compute/ops.h"
#include "compute/qgemm.h"
#include "compute/qsparse.h"
#include "driver/hal.h"
#include "model_file.h"
#include "tessera.h"

/* One entry of the context's device list. */
typedef struct tsr_ctx_device {
  char spec[160];          /* as given, e.g. "sim:latency=80"             */
  char name[40];           /* display name: backend + index, e.g. "sim1"  */
  bool host;               /* the "cpu" entry: run on the host            */
  tsr_hal_device_t *hal;   /* open device (owned), NULL if host/absent    */
  tsr_hal_caps_t caps;
  char unavailable[320];   /* why `hal` is NULL for a device entry        */
  bool lost;               /* declared gone by some engine (under lock)  */
  pthread_mutex_t lock;    /* serializes the engines' use of the device:
                              every HAL call, a launch from its first copy
                              to its last read */
  /* queue mode: who keeps a queue-mode launch running on the device (an
   * engine's device, exec.c), and how it closes it; whoever else takes the
   * lock to use the device calls tsr_ctx_device_claim first */
  void *q_holder;
  tsr_status_t (*q_release)(void *holder);
} tsr_ctx_device_t;

/* With cd->lock held: closes the queue-mode launch another user keeps
 * running on the device (none: nothing to do), so that `self` (NULL: a user
 * that is not an engine) may submit. */
static inline tsr_status_t tsr_ctx_device_claim(tsr_ctx_device_t *cd, const void *self) {
  if (!cd->q_holder || cd->q_holder == self) return TSR_OK;
  return cd->q_release(cd->q_holder);
}

struct tsr_context {
  int n_threads;
  tsr_threadpool_t *pool; /* CPU kernels' workers (owned) */
  tsr_isa_t isa;          /* int8 kernel chosen from CPUID */
  tsr_context_options_t opts; /* strings below are owned copies */
  char *devices;
  char *placement;
  char *trace_path;
  tsr_ctx_device_t *devs; /* (n_devs) */
  int n_devs;
  struct tsr_trace *trace; /* shared Chrome trace, or NULL */
  struct tsr_dist *dist;   /* the MPI job (dist.h), or NULL */
};

/* Prints "tessera: warning: ..." unless the context is quiet. */
void tsr_ctx_warn(const tsr_context_t *ctx, const char *fmt, ...) TSR_PRINTF(2, 3);

/* One weight matrix y = W x, W (rows, cols), in the precisions in use. */
typedef struct tsr_linear {
  int32_t rows, cols;
  tsr_tensor_view_t src; /* the weights as the file stores them */
  const float *f32;  /* (rows, cols): into the mapping (F32 files), or
                        f32_owned once an fp32 engine needs it; else NULL */
  float *f32_owned;
  tsr_qmatrix_t q;   /* int8 per output channel; built on first int8 use */
  tsr_qsparse_t qs;  /* q without its all-zero 16x16 tiles, built with q when
                        at most TSR_QSPARSE_USE_DENSITY of them hold a value
                        (pruned weights): the host's decode reads only these */
  /* (rows, cols) halves: into the mapping when the file stores that type,
   * else converted copies (f16_owned, bf16_owned) made when the first
   * engine of that precision is created; else NULL */
  const uint16_t *f16, *bf16;
  uint16_t *f16_owned, *bf16_owned;
} tsr_linear_t;

/* Largest fraction of non-zero 16x16 tiles for which the host's decode
 * uses the block-sparse form (measured: see README, Pruned weights). */
#define TSR_QSPARSE_USE_DENSITY 0.8

typedef struct tsr_layer {
  const float *rms_att; /* (dim) */
  const float *rms_ffn; /* (dim) */
  tsr_linear_t wq;      /* (n_heads*head_dim, dim)    */
  tsr_linear_t wk;      /* (n_kv_heads*head_dim, dim) */
  tsr_linear_t wv;      /* (n_kv_heads*head_dim, dim) */
  tsr_linear_t wo;      /* (dim, n_heads*head_dim)    */
  tsr_linear_t w1;      /* gate (hidden_dim, dim)     */
  tsr_linear_t w2;      /* down (dim, hidden_dim)     */
  tsr_linear_t w3;      /* up   (hidden_dim, dim)     */
  /* Mixture of experts (n_experts > 0; w1, w2, w3 unused): the router and
   * each expert's gate, down and up, views of the file's stacked tensors */
  int32_t n_experts;
  tsr_linear_t router;  /* (n_experts, dim) */
  tsr_linear_t *exp_gate, *exp_down, *exp_up; /* (n_experts) each */
} tsr_layer_t;

/* Tokenizer: llama2.c-style BPE over the vocabulary with byte fallback. */
typedef struct tsr_tokenizer {
  const tsr_vocab_t *vocab; /* borrowed from the model file */
  int32_t *sorted;          /* (n) ids sorted by piece, for lookup (owned) */
  int32_t byte_base;        /* id of "<0x00>", or -1 if absent */
  char byte_pieces[256][2]; /* decoded text of byte tokens */
} tsr_tokenizer_t;

struct tsr_model {
  tsr_context_t *ctx;      /* borrowed, must outlive */
  tsr_model_file_t *file;  /* owned: keeps the mapping alive */
  tsr_model_config_t cfg;
  tsr_tensor_view_t tok_embd_src; /* (vocab, dim) as the file stores it */
  const float *tok_embd;   /* (vocab, dim) in the mapping if F32, else NULL:
                              tsr_model_embed converts a row per token */
  const float *rms_final;  /* (dim) */
  float **owned_vectors;   /* converted norm vectors, freed with the model */
  int n_owned_vectors;
  tsr_layer_t *layers;     /* (n_layers) */
  tsr_linear_t output;     /* classifier (vocab, dim) */
  tsr_tokenizer_t tok;
  pthread_mutex_t quant_lock; /* guards the lazy int8 and fp32 weights */
  bool quantized;
  bool fp32_ready; /* every linear has its f32 (an fp32 engine exists) */
  bool f16_ready, bf16_ready; /* likewise for fp16 and bf16 engines */
  /* Layers [layer0, layer1) are loaded (all but on a pipeline of MPI
   * ranks); `ends`: the embedding and the classifier too (rank 0). The
   * other layers' weights are neither read nor allocated. */
  int32_t layer0, layer1;
  bool ends;
  uint32_t dist_id; /* its id on the other ranks (dist.c), 0 = none */
};

/* Quantizes every linear of `m` to int8 once (thread-safe). */
tsr_status_t tsr_model_ensure_int8(tsr_model_t *m);
/* Gives every linear of `m` its fp32 weights once (thread-safe). */
tsr_status_t tsr_model_ensure_fp32(tsr_model_t *m);
/* Gives every linear its fp16 (bf16 = false) or bf16 weights once. */
tsr_status_t tsr_model_ensure_half(tsr_model_t *m, bool bf16);
/* Row `token` of the embedding table, dim floats into out. */
void tsr_model_embed(const tsr_model_t *m, int32_t token, float *out);

/* Splits a device list as tsr_context_create() does and checks every
 * device entry's spec (tsr_hal_check_spec) without opening anything.
 * *out_count receives the number of entries, *out_backends those that are
 * not "cpu" (context.c). */
tsr_status_t tsr_context_check_devices(const char *devices, int *out_count,
                                       int *out_backends);

/* Tokenizer (tokenizer.c). */
tsr_status_t tsr_tokenizer_init(tsr_tokenizer_t *t, const tsr_vocab_t *vocab);
void tsr_tokenizer_free(tsr_tokenizer_t *t);
tsr_status_t tsr_tokenizer_encode(const tsr_tokenizer_t *t, const char *text, bool bos,
                                  bool eos, int32_t *tokens, size_t cap, size_t *n);
const char *tsr_tokenizer_piece(const tsr_tokenizer_t *t, int32_t prev, int32_t token);

#endif
