/*
 * util.h - helpers shared by the fuzz targets (fuzz/fuzz_*.c).
 *
 * Not part of libtessera. The loaders take paths, so inputs that must go
 * through them become anonymous in-memory files (memfd) named by a
 * /proc/self/fd path; one quiet CPU-only context serves every input.
 */
#ifndef TSR_FUZZ_UTIL_H
#define TSR_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

/* An input written to an anonymous file. */
typedef struct fz_file {
  int fd;         /* -1 when creating it failed */
  char path[64];  /* "/proc/self/fd/N" */
} fz_file_t;

/* Writes `size` bytes into a new anonymous file. */
bool fz_file_create(fz_file_t *f, const void *data, size_t size);
void fz_file_close(fz_file_t *f);

/* A NUL-terminated copy of the input (malloc'ed; caller frees). */
char *fz_strdup(const uint8_t *data, size_t size);

/* The context of every target: devices "cpu", one thread, quiet. Created
 * on first use, never destroyed. */
tsr_context_t *fz_context(void);

/* Releases a status a target does not care about. */
static inline void fz_ignore(tsr_status_t s) { tsr_status_free(s); }

/* End to end on a loaded model: tokenize a short text, create a session
 * (context of at most 8 positions, one row per pass; int8 weights when
 * flags & 1, else fp16 (bf16 with flags & 8) when flags & 4; int8
 * block-sparse attention when flags & 2; the int8 KV cache when flags & 16)
 * and evaluate one
 * token, then decode the pieces of the logits' best token. Aborts when the
 * library returns something a caller could not use (logits missing). */
void fz_exercise_model(tsr_model_t *m, unsigned flags);

/* A generated tiny llama model (the stories260K preset shrunk: dim 16, one
 * layer, a vocabulary of 600 pieces, F16) with a context of `seq_len`,
 * loaded in fz_context(). Aborts, naming `who`, if it cannot be made. */
tsr_model_t *fz_tiny_model(const char *who, int32_t seq_len);

/* Writes a llama2.c tokenizer for `vocab_size` ids (>= 3): <unk>, BOS,
 * EOS, byte tokens <0x00>..<0xFF> when they fit, then short pieces. Returns
 * a malloc'ed buffer of *size bytes (NULL when out of memory). */
uint8_t *fz_llama2c_tokenizer(int32_t vocab_size, size_t *size);

#endif /* TSR_FUZZ_UTIL_H */
