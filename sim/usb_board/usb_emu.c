/*
 * usb_emu.c - attaches an emulated tessera board to the process it is
 * preloaded into (LD_PRELOAD, under umockdev-wrapper; see
 * scripts/usb-emu-run).
 *
 * At load time it builds a umockdev testbed holding one USB device (sysfs
 * attributes, the binary `descriptors` attribute, the /dev/bus/usb node) and
 * attaches an ioctl handler for that node. libusb then enumerates, opens,
 * claims and transfers through its real Linux (usbfs) code; the handler
 * plays the kernel's usbfs side: SUBMITURB, REAPURBNDELAY, DISCARDURB and
 * the housekeeping ioctls. Bulk OUT URBs go to the board firmware
 * (usb_board.c), bulk IN URBs are filled from it.
 *
 * The handler runs on umockdev's thread inside this same process, so URBs
 * and their buffers are read and written in place (the client side is
 * blocked in the ioctl, or the URB belongs to "the kernel" until reaped).
 *
 * Environment:
 *   TSR_USB_BOARD=model|rtl   kernel behind the board: the functional model
 *                             (fmodel backend) or the Verilator RTL (sim)
 *   TSR_USB_BOARD_MEM=SIZE    device memory (default 128M)
 *   TSR_USB_FAULTS=...        fault injection (usb_board.h)
 *   TSR_USB_EMU_VERBOSE=1     print the board's counters at exit
 * The board itself starts at the first transfer.
 */
#include <errno.h>
#include <inttypes.h>
#include <sys/ioctl.h> /* before linux/usbdevice_fs.h: _IOR and friends */
#include <linux/usbdevice_fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <umockdev.h>

#include "base/options.h"
#include "driver/hal_impl.h"
#include "base/status.h"
#include "driver/usb/usb_proto.h"
#include "usb_board.h"

#define EMU_DEVNODE "/dev/bus/usb/001/002"
#define EMU_EP_OUT 0x01
#define EMU_EP_IN 0x81

static struct {
  UMockdevTestbed *tb;
  UMockdevIoctlBase *handler;
  tsr_usb_board_t *board;
  GQueue pending_in; /* IN URBs waiting for a frame */
  GQueue done;       /* URBs ready to be reaped     */
  bool gone;
} emu;

/* Device, configuration, interface and two bulk endpoint descriptors, as
 * the kernel exposes them in sysfs `descriptors`. */
static const uint8_t emu_descriptors[] = {
    /* device: USB 2.1, vendor-specific class, EP0 64 bytes */
    18, 1, 0x10, 0x02, 0xff, 0x00, 0x00, 64,
    TSR_USB_DEFAULT_VID & 0xff, TSR_USB_DEFAULT_VID >> 8,
    TSR_USB_DEFAULT_PID & 0xff, TSR_USB_DEFAULT_PID >> 8,
    0x00, 0x01, 1, 2, 3, 1,
    /* configuration 1: one interface, self-powered */
    9, 2, 32, 0, 1, 1, 0, 0xc0, 0,
    /* interface 0: two endpoints, vendor-specific */
    9, 4, 0, 0, 2, 0xff, 0x00, 0x00, 0,
    /* bulk OUT 0x01 and bulk IN 0x81, 512-byte packets */
    7, 5, EMU_EP_OUT, 0x02, 0x00, 0x02, 0,
    7, 5, EMU_EP_IN, 0x02, 0x00, 0x02, 0,
};

static void complete_urb(struct usbdevfs_urb *urb, int status, int actual) {
  urb->status = status;
  urb->actual_length = actual;
  g_queue_push_tail(&emu.done, urb);
}

/* Moves board frames into waiting IN URBs; notices an unplug. */
static void pump(void) {
  if (!emu.board) return;
  if (!emu.gone && tsr_usb_board_unplugged(emu.board)) {
    emu.gone = true;
    struct usbdevfs_urb *u;
    while ((u = g_queue_pop_head(&emu.pending_in))) complete_urb(u, -ENODEV, 0);
  }
  while (!emu.gone && !g_queue_is_empty(&emu.pending_in)) {
    struct usbdevfs_urb *u = g_queue_peek_head(&emu.pending_in);
    size_t n = tsr_usb_board_transmit(emu.board, u->buffer, (size_t)u->buffer_length);
    if (!n) break;
    g_queue_pop_head(&emu.pending_in);
    complete_urb(u, 0, (int)n);
  }
}

static tsr_status_t make_board(void);

static int submit(struct usbdevfs_urb *u) {
  if (emu.gone) return -ENODEV;
  if (!emu.board) {
    /* The board (and its device memory) is made on first use, so processes
     * that never talk to it pay nothing. */
    tsr_status_t s = make_board();
    if (s) {
      fprintf(stderr, "usb-emu: the board failed to start: %s\n", tsr_status_message(s));
      tsr_status_free(s);
      emu.gone = true;
      return -ENODEV;
    }
  }
  if (u->type != USBDEVFS_URB_TYPE_BULK) {
    complete_urb(u, -EPIPE, 0); /* no control requests: stall */
  } else if (u->endpoint == EMU_EP_OUT) {
    tsr_usb_board_receive(emu.board, u->buffer, (size_t)u->buffer_length);
    /* A frame that made the board disappear dies with it. */
    if (tsr_usb_board_unplugged(emu.board)) complete_urb(u, -ENODEV, 0);
    else complete_urb(u, 0, u->buffer_length);
  } else if (u->endpoint == EMU_EP_IN) {
    g_queue_push_tail(&emu.pending_in, u);
  } else {
    return -ENOENT;
  }
  pump();
  return 0;
}

static int reap(void **out) {
  pump();
  struct usbdevfs_urb *u = g_queue_pop_head(&emu.done);
  if (u) {
    *out = u;
    return 0;
  }
  return emu.gone ? -ENODEV : -EAGAIN;
}

static int discard(struct usbdevfs_urb *u) {
  GList *l = g_queue_find(&emu.pending_in, u);
  if (!l) return -EINVAL; /* already completed */
  g_queue_delete_link(&emu.pending_in, l);
  complete_urb(u, -ENOENT, 0);
  return 0;
}

static gboolean on_ioctl(UMockdevIoctlBase *handler, UMockdevIoctlClient *client,
                         gpointer data) {
  unsigned long req = umockdev_ioctl_client_get_request(client);
  UMockdevIoctlData *arg = umockdev_ioctl_client_get_arg(client);
  void *p = *(void **)arg->data;
  int rc = 0;
  switch (req) {
    case USBDEVFS_GET_CAPABILITIES:
      /* No BULK_CONTINUATION: libusb would split transfers into 16 KiB URBs;
       * with NO_PACKET_SIZE_LIM one transfer is one URB is one frame. */
      *(uint32_t *)p = USBDEVFS_CAP_NO_PACKET_SIZE_LIM |
                       USBDEVFS_CAP_REAP_AFTER_DISCONNECT | USBDEVFS_CAP_ZERO_PACKET;
      break;
    case USBDEVFS_SUBMITURB: rc = submit(p); break;
    case USBDEVFS_REAPURB:
    case USBDEVFS_REAPURBNDELAY: rc = reap(p); break;
    case USBDEVFS_DISCARDURB: rc = discard(p); break;
    case USBDEVFS_CLAIMINTERFACE:
    case USBDEVFS_RELEASEINTERFACE:
    case USBDEVFS_SETINTERFACE:
    case USBDEVFS_SETCONFIGURATION:
    case USBDEVFS_CLEAR_HALT:
    case USBDEVFS_RESETEP:
    case USBDEVFS_RESET:
      rc = emu.gone ? -ENODEV : 0;
      break;
    case USBDEVFS_GETDRIVER:
    case USBDEVFS_IOCTL:
      rc = -ENODATA; /* no kernel driver bound */
      break;
    default: rc = -ENOTTY;
  }
  umockdev_ioctl_client_complete(client, rc < 0 ? -1 : rc, rc < 0 ? -rc : 0);
  return TRUE;
}

static const char *env_or(const char *name, const char *def) {
  const char *v = getenv(name);
  return v && *v ? v : def;
}

static tsr_status_t make_board(void) {
  const char *kind = env_or("TSR_USB_BOARD", "model");
  uint64_t mem = 0;
  TSR_RETURN_IF(tsr_opt_u64("TSR_USB_BOARD_MEM", "size", env_or("TSR_USB_BOARD_MEM", "128M"),
                                1u << 20, 1ull << 34, &mem));
  char engine[96];
  if (!strcmp(kind, "model")) {
    snprintf(engine, sizeof engine, "fmodel:mem=%" PRIu64, mem);
  } else if (!strcmp(kind, "rtl")) {
    snprintf(engine, sizeof engine, "sim:mem=%" PRIu64, mem);
  } else {
    return TSR_ERR(INVALID_ARGUMENT, "TSR_USB_BOARD='%s': use model or rtl", kind);
  }
  tsr_usb_board_config_t cfg = {.engine = engine, .kind = kind, .mem_size = mem,
                                .faults = getenv("TSR_USB_FAULTS")};
  return tsr_usb_board_create(&cfg, &emu.board);
}

static tsr_status_t make_testbed(void) {
  char vid[8], pid[8], product[32];
  snprintf(vid, sizeof vid, "%04x", TSR_USB_DEFAULT_VID);
  snprintf(pid, sizeof pid, "%04x", TSR_USB_DEFAULT_PID);
  snprintf(product, sizeof product, "%x/%x/100", TSR_USB_DEFAULT_VID, TSR_USB_DEFAULT_PID);
  emu.tb = umockdev_testbed_new();
  gchar *sys = umockdev_testbed_add_device(
      emu.tb, "usb", "usb1/1-1", NULL,
      /* attributes */
      "idVendor", vid, "idProduct", pid, "busnum", "1", "devnum", "2", "speed", "5000",
      "bConfigurationValue", "1", "bNumConfigurations", "1", "bNumInterfaces", " 1",
      "manufacturer", "tessera", "product", "tessera board (emulated)", "serial", "EMU0001",
      NULL,
      /* properties */
      "DEVNAME", EMU_DEVNODE, "DEVTYPE", "usb_device", "BUSNUM", "001", "DEVNUM", "002",
      "PRODUCT", product, "TYPE", "255/0/0", NULL);
  if (!sys) return TSR_ERR(INTERNAL, "usb-emu: umockdev could not add the device");
  umockdev_testbed_set_attribute_binary(emu.tb, sys, "descriptors", (guint8 *)emu_descriptors,
                                        (gint)sizeof emu_descriptors);
  g_free(sys);
  /* add_device does not create the device node: make it. */
  gchar *root = umockdev_testbed_get_root_dir(emu.tb);
  gchar *node = g_build_filename(root, EMU_DEVNODE, NULL);
  gchar *dir = g_path_get_dirname(node);
  GError *err = NULL;
  tsr_status_t s = TSR_OK;
  if (g_mkdir_with_parents(dir, 0755) != 0 || !g_file_set_contents(node, "", 0, &err))
    s = TSR_ERR(IO, "usb-emu: cannot create %s: %s", node, err ? err->message : strerror(errno));
  g_clear_error(&err);
  g_free(dir);
  g_free(node);
  g_free(root);
  if (s) return s;
  emu.handler = umockdev_ioctl_base_new();
  g_signal_connect(emu.handler, "handle-ioctl", G_CALLBACK(on_ioctl), NULL);
  if (!umockdev_testbed_attach_ioctl(emu.tb, EMU_DEVNODE, emu.handler, &err)) {
    s = TSR_ERR(INTERNAL, "usb-emu: attaching the ioctl handler: %s",
                err ? err->message : "unknown error");
    g_clear_error(&err);
  }
  return s;
}

__attribute__((constructor)) static void emu_start(void) {
  const char *pre = getenv("LD_PRELOAD");
  if (!pre || !strstr(pre, "libumockdev-preload")) {
    fprintf(stderr, "usb-emu: not running under umockdev-wrapper; no board attached "
                    "(use scripts/usb-emu-run)\n");
    return;
  }
  g_queue_init(&emu.pending_in);
  g_queue_init(&emu.done);
  tsr_status_t s = make_testbed();
  if (s) {
    fprintf(stderr, "usb-emu: no board attached: %s\n", tsr_status_message(s));
    tsr_status_free(s);
  }
}

__attribute__((destructor)) static void emu_stop(void) {
  if (emu.board && getenv("TSR_USB_EMU_VERBOSE")) {
    tsr_usb_board_stats_t st;
    tsr_usb_board_stats(emu.board, &st);
    fprintf(stderr, "usb-board: frames rx %" PRIu64 " tx %" PRIu64 ", bad rx %" PRIu64
            ", naks %" PRIu64 ", replays %" PRIu64 ", launches %" PRIu64
            "; injected drop %" PRIu64 " corrupt %" PRIu64 " dup %" PRIu64 " delay %" PRIu64 "\n",
            st.frames_rx, st.frames_tx, st.bad_rx, st.naks, st.replays, st.launches, st.inj_drop,
            st.inj_corrupt, st.inj_dup, st.inj_delay);
  }
  if (emu.tb) {
    if (emu.handler) umockdev_testbed_detach_ioctl(emu.tb, EMU_DEVNODE, NULL);
    g_object_unref(emu.tb); /* removes the testbed directory */
    emu.tb = NULL;
  }
  if (emu.handler) g_object_unref(emu.handler);
  emu.handler = NULL;
  tsr_usb_board_destroy(emu.board);
  emu.board = NULL;
}
