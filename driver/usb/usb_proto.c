/* usb_proto.c - frame encoding, decoding and CRC32 of the USB protocol. */
#include "usb_proto.h"

#include <pthread.h>
#include <string.h>

#include "driver/tsr_regmap.h"

/* Slicing-by-8 tables for the reflected IEEE polynomial 0xEDB88320: the
 * CRC is computed over every byte that crosses the bus, so its cost is the
 * host's cost per byte moved. */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_tab[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
}

uint32_t tsr_usb_crc32(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  const uint8_t *p = data;
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo = tsr_get_le32(p) ^ c, hi = tsr_get_le32(p + 4);
    c = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^ crc_tab[5][(lo >> 16) & 0xff] ^
        crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^ crc_tab[2][(hi >> 8) & 0xff] ^
        crc_tab[1][(hi >> 16) & 0xff] ^ crc_tab[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

static void put_hdr(uint8_t *f, const tsr_usb_hdr_t *h, uint32_t pcrc) {
  tsr_put_le32(f + 0, TSR_USB_MAGIC);
  f[4] = (uint8_t)TSR_USB_VERSION;
  f[5] = h->type;
  f[6] = (uint8_t)h->flags;
  f[7] = (uint8_t)(h->flags >> 8);
  tsr_put_le32(f + 8, h->seq);
  tsr_put_le32(f + 12, h->len);
  tsr_put_le64(f + 16, h->addr);
  tsr_put_le32(f + 24, h->arg0);
  tsr_put_le32(f + 28, h->arg1);
  tsr_put_le32(f + 32, pcrc);
  tsr_put_le32(f + 36, tsr_usb_crc32(0, f, 36));
}

size_t tsr_usb_frame_seal(uint8_t *frame, const tsr_usb_hdr_t *h) {
  uint32_t pcrc = h->len ? tsr_usb_crc32(0, frame + TSR_USB_HDR_BYTES, h->len) : 0;
  put_hdr(frame, h, pcrc);
  return TSR_USB_HDR_BYTES + (size_t)h->len;
}

size_t tsr_usb_frame_encode(uint8_t *out, size_t cap, const tsr_usb_hdr_t *h,
                            const void *payload) {
  if (cap < TSR_USB_HDR_BYTES || cap - TSR_USB_HDR_BYTES < h->len) return 0;
  if (h->len) memcpy(out + TSR_USB_HDR_BYTES, payload, h->len);
  return tsr_usb_frame_seal(out, h);
}

tsr_usb_decode_t tsr_usb_frame_decode(const uint8_t *buf, size_t n, tsr_usb_hdr_t *h,
                                      const uint8_t **payload) {
  *payload = NULL;
  if (n < TSR_USB_HDR_BYTES) return TSR_USB_D_SHORT;
  if (tsr_get_le32(buf) != TSR_USB_MAGIC || buf[4] != TSR_USB_VERSION) return TSR_USB_D_MAGIC;
  if (tsr_usb_crc32(0, buf, 36) != tsr_get_le32(buf + 36)) return TSR_USB_D_HDR_CRC;
  h->type = buf[5];
  h->flags = (uint16_t)(buf[6] | buf[7] << 8);
  h->seq = tsr_get_le32(buf + 8);
  h->len = tsr_get_le32(buf + 12);
  h->addr = tsr_get_le64(buf + 16);
  h->arg0 = tsr_get_le32(buf + 24);
  h->arg1 = tsr_get_le32(buf + 28);
  h->pcrc = tsr_get_le32(buf + 32);
  if (h->len > TSR_USB_MAX_PAYLOAD || n - TSR_USB_HDR_BYTES != h->len) return TSR_USB_D_LENGTH;
  uint32_t c = h->len ? tsr_usb_crc32(0, buf + TSR_USB_HDR_BYTES, h->len) : 0;
  if (c != h->pcrc) return TSR_USB_D_PAYLOAD_CRC;
  *payload = buf + TSR_USB_HDR_BYTES;
  return TSR_USB_D_OK;
}

const char *tsr_usb_type_name(unsigned type) {
  static const char *const names[] = {"?",        "HELLO",    "REG_WRITE", "REG_READ", "MEM_WRITE",
                                      "MEM_READ", "RUN",      "STATUS",    "RESET",    "NAK"};
  return type < sizeof names / sizeof names[0] ? names[type] : "?";
}

const char *tsr_usb_error_name(uint32_t code) {
  switch (code) {
    case TSR_USB_E_BAD_TYPE: return "unknown command";
    case TSR_USB_E_RANGE: return "address range outside device memory";
    case TSR_USB_E_BUSY: return "launch queue full";
    case TSR_USB_E_BAD_LEN: return "wrong payload length for the command";
    case TSR_USB_E_TAG: return "unknown launch tag";
    case TSR_USB_E_DEVICE: return "the device behind the board failed";
    default: return "unknown board error";
  }
}

void tsr_usb_info_pack(uint8_t out[TSR_USB_INFO_BYTES], const tsr_usb_info_t *in) {
  memset(out, 0, TSR_USB_INFO_BYTES);
  tsr_put_le32(out + 0, in->proto_version);
  tsr_put_le32(out + 4, in->max_payload);
  tsr_put_le64(out + 8, in->mem_base);
  tsr_put_le64(out + 16, in->mem_size);
  tsr_put_le32(out + 24, in->rows);
  tsr_put_le32(out + 28, in->cols);
  tsr_put_le32(out + 32, in->clock_khz);
  tsr_put_le32(out + 36, in->queue_depth);
  tsr_put_le32(out + 40, in->mem_bytes_per_cycle);
  memcpy(out + 44, in->kind, sizeof in->kind);
  out[63] = 0;
}

void tsr_usb_info_unpack(tsr_usb_info_t *out, const uint8_t in[TSR_USB_INFO_BYTES]) {
  out->proto_version = tsr_get_le32(in + 0);
  out->max_payload = tsr_get_le32(in + 4);
  out->mem_base = tsr_get_le64(in + 8);
  out->mem_size = tsr_get_le64(in + 16);
  out->rows = tsr_get_le32(in + 24);
  out->cols = tsr_get_le32(in + 28);
  out->clock_khz = tsr_get_le32(in + 32);
  out->queue_depth = tsr_get_le32(in + 36);
  out->mem_bytes_per_cycle = tsr_get_le32(in + 40);
  memcpy(out->kind, in + 44, sizeof out->kind);
  out->kind[sizeof out->kind - 1] = '\0';
}

void tsr_usb_run_pack(uint8_t out[TSR_USB_RUN_BYTES], const tsr_hal_command_t *cmd) {
  tsr_put_le64(out + 0, cmd->window_base);
  tsr_put_le64(out + 8, cmd->window_size);
  tsr_put_le64(out + 16, cmd->ring);
  tsr_put_le32(out + 24, cmd->n_desc);
}

void tsr_usb_run_unpack(tsr_hal_command_t *cmd, const uint8_t in[TSR_USB_RUN_BYTES]) {
  cmd->window_base = tsr_get_le64(in + 0);
  cmd->window_size = tsr_get_le64(in + 8);
  cmd->ring = tsr_get_le64(in + 16);
  cmd->n_desc = tsr_get_le32(in + 24);
  cmd->flags = 0; /* a RUN is a plain launch: the link carries no queue mode */
}

void tsr_usb_result_pack(uint8_t out[TSR_USB_RESULT_BYTES], const tsr_hal_result_t *r) {
  tsr_put_le32(out + 0, r->hw_status);
  tsr_put_le32(out + 4, r->err_index);
  tsr_put_le32(out + 8, r->desc_done);
  tsr_put_le64(out + 12, r->cycles);
  tsr_put_le64(out + 20, r->stall_cycles);
  tsr_put_le64(out + 28, r->bytes_rd);
  tsr_put_le64(out + 36, r->bytes_wr);
  tsr_put_le64(out + 44, r->macs);
}

void tsr_usb_result_unpack(tsr_hal_result_t *r, const uint8_t in[TSR_USB_RESULT_BYTES]) {
  r->hw_status = tsr_get_le32(in + 0);
  r->err_index = tsr_get_le32(in + 4);
  r->desc_done = tsr_get_le32(in + 8);
  r->cycles = tsr_get_le64(in + 12);
  r->stall_cycles = tsr_get_le64(in + 20);
  r->bytes_rd = tsr_get_le64(in + 28);
  r->bytes_wr = tsr_get_le64(in + 36);
  r->macs = tsr_get_le64(in + 44);
}
