/*
 * usb_proto.h - the tessera USB wire protocol: one definition shared by the
 * host backend (driver/usb) and the board (sim/usb_board).
 *
 * Internal header. Every bulk transfer carries exactly one frame: a 40-byte
 * little-endian header followed by `len` payload bytes. The header has its
 * own CRC32 so a frame whose payload is damaged can still be answered with
 * a NAK naming its sequence number; the payload has a second CRC32. See
 * driver/usb/README.md for the layout, the commands and the recovery rules.
 *
 *   off size field
 *    0   4   magic    TSR_USB_MAGIC ("TSRU")
 *    4   1   version  TSR_USB_VERSION
 *    5   1   type     tsr_usb_type_t
 *    6   2   flags    TSR_USB_F_*
 *    8   4   seq      request sequence number (a response repeats it)
 *   12   4   len      payload bytes that follow the header
 *   16   8   addr     device address or register offset
 *   24   4   arg0     command argument / result
 *   28   4   arg1     command argument / result
 *   32   4   pcrc     CRC32 of the payload (0 when len == 0)
 *   36   4   hcrc     CRC32 of header bytes 0..35
 */
#ifndef TSR_USB_PROTO_H
#define TSR_USB_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "driver/hal.h"

#define TSR_USB_MAGIC 0x55525354u /* "TSRU" as little-endian bytes */
#define TSR_USB_VERSION 1u
#define TSR_USB_HDR_BYTES 40u
/* Largest payload any frame may carry (the board may announce less). */
#define TSR_USB_MAX_PAYLOAD (1u << 20)

/* Default identity of the board: the pid.codes test VID:PID. A production
 * board would carry its own allocation; override with usb:vid=,pid=. */
#define TSR_USB_DEFAULT_VID 0x1209u
#define TSR_USB_DEFAULT_PID 0x0001u

typedef enum tsr_usb_type {
  TSR_USB_T_HELLO = 1,     /* arg0 host nonce; resp payload tsr_usb_info   */
  TSR_USB_T_REG_WRITE = 2, /* addr offset, arg0 value                       */
  TSR_USB_T_REG_READ = 3,  /* addr offset; resp arg0 value                  */
  TSR_USB_T_MEM_WRITE = 4, /* addr, payload                                 */
  TSR_USB_T_MEM_READ = 5,  /* addr, arg0 length; resp payload               */
  TSR_USB_T_RUN = 6,       /* payload tsr_hal_command; resp arg0 tag        */
  TSR_USB_T_STATUS = 7,    /* arg0 tag; resp arg0 state, payload result     */
  TSR_USB_T_RESET = 8,     /* aborts queued launches, returns to idle      */
  TSR_USB_T_NAK = 9,       /* board -> host: seq's payload was damaged     */
} tsr_usb_type_t;

enum {
  TSR_USB_F_RESP = 1u << 0, /* a response (board -> host)                    */
  TSR_USB_F_ERR = 1u << 1,  /* the command failed: arg0 TSR_USB_E_*, arg1 detail */
};

/* Errors a board reports in a response with TSR_USB_F_ERR. */
enum {
  TSR_USB_E_BAD_TYPE = 1, /* unknown command                               */
  TSR_USB_E_RANGE = 2,    /* address range outside device memory          */
  TSR_USB_E_BUSY = 3,     /* launch queue full; retry after a STATUS      */
  TSR_USB_E_BAD_LEN = 4,  /* payload length wrong for the command         */
  TSR_USB_E_TAG = 5,      /* STATUS for a tag the board does not know     */
  TSR_USB_E_DEVICE = 6,   /* the device behind the board failed           */
};

/* NAK reasons (arg0 of a TSR_USB_T_NAK frame). */
enum { TSR_USB_NAK_PAYLOAD_CRC = 1, TSR_USB_NAK_LENGTH = 2 };

/* Launch states in a STATUS response (arg0). */
enum {
  TSR_USB_L_QUEUED = 1,
  TSR_USB_L_RUNNING = 2,
  TSR_USB_L_DONE = 3,
  TSR_USB_L_ABORTED = 4,
};

typedef struct tsr_usb_hdr {
  uint8_t type;
  uint16_t flags;
  uint32_t seq;
  uint32_t len;
  uint64_t addr;
  uint32_t arg0, arg1;
  uint32_t pcrc; /* filled by tsr_usb_frame_seal / decode */
} tsr_usb_hdr_t;

/* Outcome of tsr_usb_frame_decode. */
typedef enum tsr_usb_decode {
  TSR_USB_D_OK = 0,
  TSR_USB_D_SHORT = 1,       /* fewer than TSR_USB_HDR_BYTES              */
  TSR_USB_D_MAGIC = 2,       /* magic or version wrong                    */
  TSR_USB_D_HDR_CRC = 3,     /* header CRC mismatch: nothing is trusted   */
  TSR_USB_D_LENGTH = 4,      /* header fine, len disagrees with the size  */
  TSR_USB_D_PAYLOAD_CRC = 5, /* header fine (seq usable), payload damaged */
} tsr_usb_decode_t;

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32): start with crc = 0. */
uint32_t tsr_usb_crc32(uint32_t crc, const void *data, size_t n);

/* Writes the header of `h` into frame[0..40) and its CRCs, the payload
 * being h->len bytes already at frame + TSR_USB_HDR_BYTES. Returns the frame
 * size (TSR_USB_HDR_BYTES + h->len). */
size_t tsr_usb_frame_seal(uint8_t *frame, const tsr_usb_hdr_t *h);

/* Encodes a frame with a separate payload (copied). `cap` must hold
 * TSR_USB_HDR_BYTES + h->len; returns the frame size or 0 if it does not. */
size_t tsr_usb_frame_encode(uint8_t *out, size_t cap, const tsr_usb_hdr_t *h,
                            const void *payload);

/* Parses a frame of `n` bytes. On TSR_USB_D_OK, *h is filled and *payload
 * points into `buf`; on TSR_USB_D_PAYLOAD_CRC and TSR_USB_D_LENGTH *h is
 * filled too (the header was intact). */
tsr_usb_decode_t tsr_usb_frame_decode(const uint8_t *buf, size_t n, tsr_usb_hdr_t *h,
                                      const uint8_t **payload);

/* Name of a command type, e.g. "MEM_WRITE"; "?" for unknown. */
const char *tsr_usb_type_name(unsigned type);
/* Text of a board error code. */
const char *tsr_usb_error_name(uint32_t code);

/* Number of chunks of at most `chunk` bytes that cover `n` bytes. */
static inline uint64_t tsr_usb_chunk_count(uint64_t n, uint32_t chunk) {
  return chunk ? (n + chunk - 1) / chunk : 0;
}

/* What a board announces in its HELLO response (fixed 64-byte payload). */
typedef struct tsr_usb_info {
  uint32_t proto_version; /* TSR_USB_VERSION                               */
  uint32_t max_payload;   /* largest payload it accepts / sends            */
  uint64_t mem_base;      /* device address of its memory                  */
  uint64_t mem_size;      /* bytes of device memory                        */
  uint32_t rows, cols;    /* MAC array geometry                            */
  uint32_t clock_khz;     /* stated kernel clock                           */
  uint32_t queue_depth;   /* launches it queues before answering BUSY      */
  uint32_t mem_bytes_per_cycle;
  char kind[20];          /* "model" or "rtl", NUL-terminated              */
} tsr_usb_info_t;
#define TSR_USB_INFO_BYTES 64u
void tsr_usb_info_pack(uint8_t out[TSR_USB_INFO_BYTES], const tsr_usb_info_t *in);
void tsr_usb_info_unpack(tsr_usb_info_t *out, const uint8_t in[TSR_USB_INFO_BYTES]);

/* A launch (RUN payload): window base, window size, ring, n_desc. */
#define TSR_USB_RUN_BYTES 28u
void tsr_usb_run_pack(uint8_t out[TSR_USB_RUN_BYTES], const tsr_hal_command_t *cmd);
void tsr_usb_run_unpack(tsr_hal_command_t *cmd, const uint8_t in[TSR_USB_RUN_BYTES]);

/* A finished launch (STATUS payload): the registers after ap_done. */
#define TSR_USB_RESULT_BYTES 52u
void tsr_usb_result_pack(uint8_t out[TSR_USB_RESULT_BYTES], const tsr_hal_result_t *r);
void tsr_usb_result_unpack(tsr_hal_result_t *r, const uint8_t in[TSR_USB_RESULT_BYTES]);

#endif /* TSR_USB_PROTO_H */
