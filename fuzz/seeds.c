/*
 * seeds.c - writes the generated seed corpora of the fuzz targets.
 *
 *   fuzz-seeds DIR    DIR/<target>/<name> for every target
 *
 * Every seed comes from the project's own writers: the GGUF writer of
 * gen-model (tsr_gen_model_write), the xclbin builder, the USB frame
 * encoder; llama2.c checkpoints and tokenizers, which the project only
 * reads, are laid out here as llama2.c's export writes them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "driver/tsr_regmap.h"
#include "driver/usb/usb_proto.h"
#include "driver/xrt/tsr_xclbin.h"
#include "fuzz/frames.h"
#include "fuzz/util.h"
#include "host/src/model_file.h"

static const char *root;

static void die(const char *what, tsr_status_t s) {
  fprintf(stderr, "fuzz-seeds: %s: %s\n", what, s ? tsr_status_message(s) : strerror(errno));
  exit(1);
}

static void path_of(char *out, size_t cap, const char *target, const char *name) {
  snprintf(out, cap, "%s/%s", root, target);
  if (mkdir(out, 0755) && errno != EEXIST) die(out, TSR_OK);
  snprintf(out, cap, "%s/%s/%s", root, target, name);
}

static void put(const char *target, const char *name, const void *data, size_t n) {
  char p[512];
  path_of(p, sizeof p, target, name);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f)) die(p, TSR_OK);
}

/* ---- models ---- */

static void gguf(const char *name, int32_t dim, int32_t hid, int32_t layers, int32_t heads,
                 int32_t kv, int32_t vocab, tsr_dtype_t type) {
  char p[512];
  path_of(p, sizeof p, "fuzz_gguf", name);
  tsr_gen_params_t g;
  tsr_status_t s = tsr_gen_preset("stories260K", &g);
  if (s) die("preset", s);
  g.dim = dim;
  g.hidden_dim = hid;
  g.n_layers = layers;
  g.n_heads = heads;
  g.n_kv_heads = kv;
  g.vocab_size = vocab;
  g.seq_len = 16;
  g.type = type;
  s = tsr_gen_model_write(p, &g);
  if (s) die(p, s);
}

/* A legacy llama2.c checkpoint: 7 int32, then the fp32 arrays (freq_cis
 * tables included); vocab < 0 stores a separate classifier. */
static void llama2c(const char *name, int32_t dim, int32_t hid, int32_t L, int32_t heads,
                    int32_t kv, int32_t vocab, int32_t seq) {
  const int32_t V = vocab < 0 ? -vocab : vocab, kvd = dim * kv / heads, hs = dim / heads;
  size_t nf = (size_t)V * dim + (size_t)L * (dim + (size_t)dim * dim + 2 * (size_t)kvd * dim +
                                             (size_t)dim * dim + dim + 3 * (size_t)hid * dim) +
              dim + 2 * (size_t)seq * (hs / 2) + (vocab < 0 ? (size_t)V * dim : 0);
  size_t n = 28 + 4 * nf;
  uint8_t *b = malloc(n);
  if (!b) die("llama2c", TSR_OK);
  int32_t h[7] = {dim, hid, L, heads, kv, vocab, seq};
  memcpy(b, h, sizeof h);
  uint32_t x = 12345;
  for (size_t i = 0; i < nf; i++) {
    x = x * 1664525u + 1013904223u;
    float f = (float)((int32_t)(x >> 8) % 2000) / 10000.0f;
    memcpy(b + 28 + 4 * i, &f, 4);
  }
  put("fuzz_llama2c", name, b, n);
  free(b);
}

static void tokenizer(const char *name, int32_t vocab) {
  size_t n = 0;
  uint8_t *t = fz_llama2c_tokenizer(vocab, &n);
  uint8_t *b = malloc(n + 2);
  if (!t || !b) die("tokenizer", TSR_OK);
  uint16_t sel = (uint16_t)(vocab - 3);
  b[0] = (uint8_t)sel;
  b[1] = (uint8_t)(sel >> 8);
  memcpy(b + 2, t, n);
  put("fuzz_tokenizer", name, b, n + 2);
  free(t);
  free(b);
}

/* ---- xclbin ---- */

static void xclbin(const char *name, tsr_xclbin_ctrl_t ctrl, const char *kernel) {
  tsr_xclbin_write_opts_t o;
  tsr_xclbin_write_opts_init(&o);
  o.ctrl = ctrl;
  o.kernel_name = kernel;
  o.timestamp = 1700000000;
  uint8_t *d = NULL;
  size_t n = 0;
  tsr_status_t s = tsr_xclbin_build(&o, &d, &n);
  if (s) die("xclbin", s);
  put("fuzz_xclbin", name, d, n);
  free(d);
}

/* ---- USB frames ---- */

typedef struct rec {
  uint8_t buf[1 << 16];
  size_t n;
} rec_t;

static void rec_frame(rec_t *r, const tsr_usb_hdr_t *h, const void *payload) {
  uint8_t f[TSR_USB_HDR_BYTES + 4096];
  size_t n = tsr_usb_frame_encode(f, sizeof f, h, payload);
  if (!n || r->n + 3 + n > sizeof r->buf) die("frame", TSR_OK);
  r->buf[r->n] = (uint8_t)n;
  r->buf[r->n + 1] = (uint8_t)(n >> 8);
  r->buf[r->n + 2] = 0;
  memcpy(r->buf + r->n + 3, f, n);
  r->n += 3 + n;
}

/* The answers a board gives to fuzz_usb_host's batch `mask` (two batches,
 * sequence numbers from 1). */
static void usb_host(const char *name, uint8_t mask, uint8_t window) {
  static rec_t r;
  r.n = 2;
  r.buf[0] = mask;
  r.buf[1] = (uint8_t)(window - 1);
  uint32_t seq = 1;
  for (int batch = 0; batch < 2; batch++)
    for (unsigned i = 0; i < 8; i++) {
      if (!(mask >> i & 1)) continue;
      static const uint8_t types[8] = {TSR_USB_T_HELLO,     TSR_USB_T_REG_READ,
                                       TSR_USB_T_MEM_READ,  TSR_USB_T_MEM_WRITE,
                                       TSR_USB_T_RUN,       TSR_USB_T_STATUS,
                                       TSR_USB_T_REG_WRITE, TSR_USB_T_RESET};
      tsr_usb_hdr_t h = {.type = types[i], .flags = TSR_USB_F_RESP, .seq = seq++};
      uint8_t payload[256] = {0};
      if (types[i] == TSR_USB_T_HELLO) {
        tsr_usb_info_t in = {.proto_version = TSR_USB_VERSION, .max_payload = 4096,
                             .mem_base = 0x80000000u, .mem_size = 1 << 20, .rows = 16,
                             .cols = 16, .clock_khz = 300000, .queue_depth = 16,
                             .mem_bytes_per_cycle = 64};
        snprintf(in.kind, sizeof in.kind, "model");
        tsr_usb_info_pack(payload, &in);
        h.len = TSR_USB_INFO_BYTES;
        h.arg0 = 0x1234;
      } else if (types[i] == TSR_USB_T_REG_READ) {
        h.arg0 = TSR_CTRL_AP_IDLE;
      } else if (types[i] == TSR_USB_T_MEM_READ) {
        for (int k = 0; k < 256; k++) payload[k] = (uint8_t)k;
        h.len = 256;
      } else if (types[i] == TSR_USB_T_RUN) {
        h.arg0 = 1;
      } else if (types[i] == TSR_USB_T_STATUS) {
        tsr_hal_result_t res = {.desc_done = 1, .cycles = 100, .macs = 64};
        tsr_usb_result_pack(payload, &res);
        h.arg0 = TSR_USB_L_DONE;
        h.len = TSR_USB_RESULT_BYTES;
      }
      rec_frame(&r, &h, payload);
    }
  put("fuzz_usb_host", name, r.buf, r.n);
}

/* What a host sends the board for one 4x4x8 GEMM: HELLO, the ring and
 * operands, the window registers, RUN, STATUS, the result. */
static void usb_board(void) {
  static rec_t r;
  r.n = 0;
  const uint64_t base = 0x80000000u;
  uint32_t seq = 1;
  tsr_usb_hdr_t h = {.type = TSR_USB_T_HELLO, .seq = seq++, .arg0 = 7};
  rec_frame(&r, &h, NULL);
  uint8_t mem[512] = {0};
  tsr_desc_t d = {.opcode = 1, .m = 4, .n = 4, .k = 8, .lda = 8, .ldw = 8, .ldc = 16,
                  .a_addr = base + 64, .w_addr = base + 128, .c_addr = base + 192};
  tsr_desc_pack(mem, &d);
  for (int i = 0; i < 64; i++) mem[64 + i] = (uint8_t)(i * 7 - 30);
  h = (tsr_usb_hdr_t){.type = TSR_USB_T_MEM_WRITE, .seq = seq++, .addr = base, .len = 256};
  rec_frame(&r, &h, mem);
  uint8_t run[TSR_USB_RUN_BYTES];
  tsr_hal_command_t cmd = {.window_base = base, .window_size = 4096, .ring = base, .n_desc = 1};
  tsr_usb_run_pack(run, &cmd);
  h = (tsr_usb_hdr_t){.type = TSR_USB_T_RUN, .seq = seq++, .len = TSR_USB_RUN_BYTES};
  rec_frame(&r, &h, run);
  h = (tsr_usb_hdr_t){.type = TSR_USB_T_STATUS, .seq = seq++, .arg0 = 1};
  rec_frame(&r, &h, NULL);
  h = (tsr_usb_hdr_t){.type = TSR_USB_T_MEM_READ, .seq = seq++, .addr = base + 192, .arg0 = 64};
  rec_frame(&r, &h, NULL);
  put("fuzz_usb_board", "gemm_run", r.buf, r.n);

  /* The same launch through the registers (ap_ctrl_hs). */
  r.n = 0;
  seq = 1;
  h = (tsr_usb_hdr_t){.type = TSR_USB_T_HELLO, .seq = seq++};
  rec_frame(&r, &h, NULL);
  h = (tsr_usb_hdr_t){.type = TSR_USB_T_MEM_WRITE, .seq = seq++, .addr = base, .len = 256};
  rec_frame(&r, &h, mem);
  const struct { uint32_t off, v; } regs[] = {
      {TSR_ARG_MEM_BASE, (uint32_t)base}, {TSR_ARG_MEM_BASE + 4, 0},
      {TSR_ARG_MEM_SIZE, 4096},           {TSR_ARG_MEM_SIZE + 4, 0},
      {TSR_ARG_RING, (uint32_t)base},     {TSR_ARG_RING + 4, 0},
      {TSR_ARG_N_DESC, 1},                {TSR_REG_CTRL, TSR_CTRL_AP_START}};
  for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++) {
    h = (tsr_usb_hdr_t){.type = TSR_USB_T_REG_WRITE, .seq = seq++, .addr = regs[i].off,
                        .arg0 = regs[i].v};
    rec_frame(&r, &h, NULL);
  }
  const uint32_t reads[] = {TSR_REG_CTRL, TSR_STAT_STATUS, TSR_STAT_DESC_DONE, TSR_STAT_MACS,
                            TSR_STAT_HW_INFO};
  for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
    h = (tsr_usb_hdr_t){.type = TSR_USB_T_REG_READ, .seq = seq++, .addr = reads[i]};
    rec_frame(&r, &h, NULL);
  }
  h = (tsr_usb_hdr_t){.type = TSR_USB_T_RESET, .seq = seq++};
  rec_frame(&r, &h, NULL);
  put("fuzz_usb_board", "gemm_regs", r.buf, r.n);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz-seeds DIR\n");
    return 2;
  }
  root = argv[1];
  if (mkdir(root, 0755) && errno != EEXIST) die(root, TSR_OK);

  gguf("f16_d8", 8, 16, 1, 2, 1, 259, TSR_DTYPE_F16);
  gguf("f32_d8_l2", 8, 12, 2, 4, 2, 260, TSR_DTYPE_F32);
  gguf("q8_0_d32", 32, 32, 1, 2, 2, 259, TSR_DTYPE_Q8_0);

  llama2c("shared", 8, 16, 1, 2, 1, 32, 8);
  llama2c("separate", 8, 12, 2, 4, 2, -16, 4);
  llama2c("gqa", 16, 8, 1, 4, 2, 8, 2);

  tokenizer("v3", 3);
  tokenizer("v20", 20);
  tokenizer("v300", 300);

  xclbin("hs", TSR_XCLBIN_CTRL_HS, NULL);
  xclbin("chain", TSR_XCLBIN_CTRL_CHAIN, "other_kernel");

  usb_host("hello", 0x01, 1);
  usb_host("all", 0xff, 8);
  usb_host("mem", 0x0e, 2);
  usb_host("launch", 0x30, 4);
  usb_board();
  return 0;
}
