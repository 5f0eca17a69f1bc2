/*
 * xclbin_read.c - validates an xclbin and extracts what `tessera xclbin
 * --info` prints and what the xrt backend checks (see tsr_xclbin.h).
 *
 * Every field read from the file is bounds-checked against the file before
 * use; the first problem found becomes a FORMAT status naming the file, the
 * section and the byte offset. The metadata XML is parsed by a small
 * non-validating parser that accepts the subset xclbin metadata uses
 * (prolog, comments, elements, quoted attributes, text, the five predefined
 * entities) and rejects anything truncated or unbalanced.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "driver/tsr_regmap.h"

#include "base/status.h"
#include "tsr_xclbin.h"

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

void tsr_xclbin_info_free(tsr_xclbin_info_t *info) {
  if (!info) return;
  free(info->sections);
  free(info->mem);
  free(info->ip);
  free(info->conn);
  free(info->kernels);
  free(info);
}

/* ---- a minimal XML reader ---------------------------------------------- */

typedef struct xml {
  const char *s;   /* text (not NUL-terminated) */
  size_t n, i;     /* length, cursor */
  const char *what;
  uint64_t base;   /* file offset of s[0], for messages */
  tsr_xclbin_info_t *info;
  tsr_xclbin_kernel_t *kernel;   /* inside <kernel>, else NULL */
  int inst;                      /* index of the open <instance>, or -1 */
  char stack[32][32];            /* open element names */
  int depth;
} xml_t;

#define XML_MAX_ATTRS 24

typedef struct xml_attr {
  char name[32];
  char value[128];
} xml_attr_t;

static tsr_status_t xml_err(const xml_t *x, const char *kind, const char *fmt, const char *arg) {
  char detail[160];
  snprintf(detail, sizeof detail, fmt, arg);
  return TSR_ERR(FORMAT, "%s: %s in EMBEDDED_METADATA at file offset %" PRIu64 ": %s",
                 x->what, kind, x->base + x->i, detail);
}

static bool xml_starts(const xml_t *x, const char *lit) {
  size_t l = strlen(lit);
  return x->i + l <= x->n && !memcmp(x->s + x->i, lit, l);
}

/* Skips to just after `end`; false if the text ends first. */
static bool xml_skip_past(xml_t *x, const char *end) {
  size_t l = strlen(end);
  for (; x->i + l <= x->n; x->i++)
    if (!memcmp(x->s + x->i, end, l)) {
      x->i += l;
      return true;
    }
  x->i = x->n;
  return false;
}

static bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-' || c == '.' || c == ':';
}

static void xml_ws(xml_t *x) {
  while (x->i < x->n && (x->s[x->i] == ' ' || x->s[x->i] == '\t' || x->s[x->i] == '\n' ||
                         x->s[x->i] == '\r'))
    x->i++;
}

static tsr_status_t xml_name(xml_t *x, char *out, size_t cap) {
  size_t st = x->i;
  while (x->i < x->n && is_name_char(x->s[x->i])) x->i++;
  size_t len = x->i - st;
  if (x->i >= x->n) return xml_err(x, "truncated metadata", "%s", "the text ends inside a tag");
  if (len == 0) return xml_err(x, "malformed metadata", "%s", "expected a name");
  if (len >= cap) len = cap - 1; /* long names are kept truncated */
  memcpy(out, x->s + st, len);
  out[len] = '\0';
  return TSR_OK;
}

/* Decodes the predefined entities in place. */
static void xml_unescape(char *v) {
  static const struct { const char *ent; char c; } ents[] = {
      {"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&apos;", '\''}};
  char *w = v;
  for (char *r = v; *r;) {
    bool done = false;
    if (*r == '&')
      for (size_t k = 0; k < 5; k++) {
        size_t l = strlen(ents[k].ent);
        if (!strncmp(r, ents[k].ent, l)) {
          *w++ = ents[k].c;
          r += l;
          done = true;
          break;
        }
      }
    if (!done) *w++ = *r++;
  }
  *w = '\0';
}

static const char *attr(const xml_attr_t *a, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(a[i].name, name)) return a[i].value;
  return NULL;
}

static uint64_t attr_u64(const xml_attr_t *a, int n, const char *name, uint64_t dflt) {
  const char *v = attr(a, n, name);
  if (!v || !*v) return dflt;
  return strtoull(v, NULL, 0);
}

static void copy_attr(char *dst, size_t cap, const xml_attr_t *a, int n, const char *name) {
  const char *v = attr(a, n, name);
  size_t len = v ? strlen(v) : 0;
  if (len >= cap) len = cap - 1; /* kept truncated */
  if (len) memcpy(dst, v, len);
  dst[len] = '\0';
}

/* What the reader keeps from an element. */
static tsr_status_t xml_element(xml_t *x, const char *name, const xml_attr_t *a, int na) {
  const char *parent = x->depth > 0 ? x->stack[x->depth - 1] : "";
  tsr_xclbin_info_t *info = x->info;
  if (!strcmp(name, "kernel") && !strcmp(parent, "core")) {
    if (info->n_kernels >= TSR_XCLBIN_MAX_KERNELS)
      return xml_err(x, "malformed metadata", "more than %s kernels", "16");
    x->kernel = &info->kernels[info->n_kernels++];
    memset(x->kernel, 0, sizeof *x->kernel);
    copy_attr(x->kernel->name, sizeof x->kernel->name, a, na, "name");
    copy_attr(x->kernel->protocol, sizeof x->kernel->protocol, a, na, "hwControlProtocol");
    if (!x->kernel->name[0])
      return xml_err(x, "malformed metadata", "%s", "<kernel> without a name");
  } else if (x->kernel && !strcmp(parent, "kernel") && !strcmp(name, "arg")) {
    if (x->kernel->n_args >= TSR_XCLBIN_MAX_ARGS)
      return xml_err(x, "malformed metadata", "kernel '%s' has too many arguments",
                     x->kernel->name);
    tsr_xclbin_arg_t *g = &x->kernel->args[x->kernel->n_args++];
    copy_attr(g->name, sizeof g->name, a, na, "name");
    copy_attr(g->type, sizeof g->type, a, na, "type");
    copy_attr(g->port, sizeof g->port, a, na, "port");
    const char *id = attr(a, na, "id");
    g->id = id && *id ? (int32_t)strtol(id, NULL, 0) : -1;
    g->addr_qual = (uint32_t)attr_u64(a, na, "addressQualifier", 0);
    g->offset = attr_u64(a, na, "offset", 0);
    g->size = attr_u64(a, na, "size", 0);
    g->host_offset = attr_u64(a, na, "hostOffset", 0);
    g->host_size = attr_u64(a, na, "hostSize", 0);
    if (!attr(a, na, "offset") || !attr(a, na, "size"))
      return xml_err(x, "malformed metadata", "argument '%s' lacks offset or size", g->name);
  } else if (x->kernel && !strcmp(parent, "kernel") && !strcmp(name, "port")) {
    if (x->kernel->n_ports < TSR_XCLBIN_MAX_PORTS) {
      tsr_xclbin_port_t *p = &x->kernel->ports[x->kernel->n_ports++];
      copy_attr(p->name, sizeof p->name, a, na, "name");
      copy_attr(p->mode, sizeof p->mode, a, na, "mode");
      p->range = attr_u64(a, na, "range", 0);
      p->data_width = (uint32_t)attr_u64(a, na, "dataWidth", 0);
    }
  } else if (x->kernel && !strcmp(parent, "kernel") && !strcmp(name, "instance")) {
    x->inst = -1;
    if (x->kernel->n_inst < TSR_XCLBIN_MAX_INST) {
      x->inst = (int)x->kernel->n_inst++;
      copy_attr(x->kernel->inst[x->inst], sizeof x->kernel->inst[0], a, na, "name");
      x->kernel->inst_base[x->inst] = 0;
    }
  } else if (x->kernel && x->inst >= 0 && !strcmp(parent, "instance") &&
             !strcmp(name, "addrRemap")) {
    x->kernel->inst_base[x->inst] = attr_u64(a, na, "base", 0);
  }
  return TSR_OK;
}

static void xml_element_end(xml_t *x, const char *name) {
  if (!strcmp(name, "kernel")) x->kernel = NULL;
  if (!strcmp(name, "instance")) x->inst = -1;
}

/* Parses a start tag after '<'. Sets *self_closing. */
static tsr_status_t xml_start_tag(xml_t *x) {
  char name[32];
  TSR_RETURN_IF(xml_name(x, name, sizeof name));
  xml_attr_t a[XML_MAX_ATTRS];
  int na = 0;
  for (;;) {
    xml_ws(x);
    if (x->i >= x->n) return xml_err(x, "truncated metadata", "inside <%s>", name);
    char c = x->s[x->i];
    if (c == '/' || c == '>') break;
    xml_attr_t tmp, *cur = na < XML_MAX_ATTRS ? &a[na] : &tmp;
    TSR_RETURN_IF(xml_name(x, cur->name, sizeof cur->name));
    xml_ws(x);
    if (x->i >= x->n) return xml_err(x, "truncated metadata", "inside <%s>", name);
    if (x->s[x->i] != '=')
      return xml_err(x, "malformed metadata", "attribute without '=' in <%s>", name);
    x->i++;
    xml_ws(x);
    if (x->i >= x->n) return xml_err(x, "truncated metadata", "inside <%s>", name);
    char q = x->s[x->i];
    if (q != '"' && q != '\'')
      return xml_err(x, "malformed metadata", "unquoted attribute value in <%s>", name);
    size_t st = ++x->i;
    while (x->i < x->n && x->s[x->i] != q) {
      if (x->s[x->i] == '<')
        return xml_err(x, "malformed metadata", "'<' inside an attribute of <%s>", name);
      x->i++;
    }
    if (x->i >= x->n) return xml_err(x, "truncated metadata", "inside <%s>", name);
    size_t len = x->i - st;
    if (len >= sizeof cur->value) len = sizeof cur->value - 1;
    memcpy(cur->value, x->s + st, len);
    cur->value[len] = '\0';
    xml_unescape(cur->value);
    x->i++;
    if (cur == &a[na]) na++;
  }
  bool self_closing = x->s[x->i] == '/';
  if (self_closing) {
    x->i++;
    if (x->i >= x->n) return xml_err(x, "truncated metadata", "inside <%s>", name);
    if (x->s[x->i] != '>') return xml_err(x, "malformed metadata", "'/' not followed by '>' in <%s>", name);
  }
  x->i++; /* '>' */
  TSR_RETURN_IF(xml_element(x, name, a, na));
  if (!self_closing) {
    if (x->depth >= (int)(sizeof x->stack / sizeof x->stack[0]))
      return xml_err(x, "malformed metadata", "elements nested too deeply at <%s>", name);
    snprintf(x->stack[x->depth++], sizeof x->stack[0], "%s", name);
  } else {
    xml_element_end(x, name);
  }
  return TSR_OK;
}

static tsr_status_t xml_parse(xml_t *x) {
  bool root_seen = false;
  while (x->i < x->n) {
    if (x->s[x->i] != '<') {
      char c = x->s[x->i];
      if (x->depth == 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r')
        return xml_err(x, "malformed metadata", "%s", "text outside the root element");
      x->i++;
      continue;
    }
    if (xml_starts(x, "<?")) {
      if (!xml_skip_past(x, "?>")) return xml_err(x, "truncated metadata", "%s", "in <?...?>");
    } else if (xml_starts(x, "<!--")) {
      if (!xml_skip_past(x, "-->")) return xml_err(x, "truncated metadata", "%s", "in a comment");
    } else if (xml_starts(x, "<![CDATA[")) {
      if (!xml_skip_past(x, "]]>")) return xml_err(x, "truncated metadata", "%s", "in CDATA");
    } else if (xml_starts(x, "<!")) {
      if (!xml_skip_past(x, ">")) return xml_err(x, "truncated metadata", "%s", "in <!...>");
    } else if (xml_starts(x, "</")) {
      x->i += 2;
      char name[32];
      TSR_RETURN_IF(xml_name(x, name, sizeof name));
      xml_ws(x);
      if (x->i >= x->n) return xml_err(x, "truncated metadata", "in </%s>", name);
      if (x->s[x->i] != '>') return xml_err(x, "malformed metadata", "junk in </%s>", name);
      x->i++;
      if (x->depth == 0 || strcmp(x->stack[x->depth - 1], name))
        return xml_err(x, "malformed metadata", "unbalanced closing tag </%s>", name);
      x->depth--;
      xml_element_end(x, name);
    } else {
      if (x->depth == 0 && root_seen)
        return xml_err(x, "malformed metadata", "%s", "a second root element");
      x->i++;
      root_seen = true;
      TSR_RETURN_IF(xml_start_tag(x));
    }
  }
  if (x->depth > 0)
    return xml_err(x, "truncated metadata", "<%s> is never closed", x->stack[x->depth - 1]);
  if (!root_seen) return xml_err(x, "truncated metadata", "%s", "no root element");
  return TSR_OK;
}

/* ---- the container ------------------------------------------------------ */

static tsr_status_t parse_sections(const uint8_t *d, uint64_t size, const char *what,
                                   tsr_xclbin_info_t *info) {
  /* A section must lie in the file, after the section table, and not
   * overlap another one (empty sections are allowed anywhere). */
  uint64_t hdr_end = TSR_AXLF_OFF_SECTIONS + (uint64_t)info->n_sections * TSR_AXLF_SECTION_HDR_BYTES;
  for (size_t i = 0; i < info->n_sections; i++) {
    const uint8_t *h = d + TSR_AXLF_OFF_SECTIONS + i * TSR_AXLF_SECTION_HDR_BYTES;
    tsr_xclbin_section_t *s = &info->sections[i];
    s->kind = tsr_get_le32(h);
    memcpy(s->name, h + 4, 16);
    s->name[16] = '\0';
    s->offset = tsr_get_le64(h + 24);
    s->size = tsr_get_le64(h + 32);
    if (s->offset > size || s->size > size - s->offset)
      return TSR_ERR(FORMAT, "%s: section out of range: section %zu (%s '%s') at offset "
                     "%" PRIu64 " with %" PRIu64 " bytes ends past the %" PRIu64 "-byte file",
                     what, i, tsr_xclbin_kind_name(s->kind), s->name, s->offset, s->size, size);
    if (s->size && s->offset < hdr_end)
      return TSR_ERR(FORMAT, "%s: section out of range: section %zu (%s '%s') at offset "
                     "%" PRIu64 " lies inside the header and section table (which end at %"
                     PRIu64 ")", what, i, tsr_xclbin_kind_name(s->kind), s->name, s->offset,
                     hdr_end);
  }
  for (size_t i = 0; i < info->n_sections; i++)
    for (size_t j = i + 1; j < info->n_sections; j++) {
      const tsr_xclbin_section_t *a = &info->sections[i], *b = &info->sections[j];
      if (!a->size || !b->size) continue;
      if (a->offset < b->offset + b->size && b->offset < a->offset + a->size)
        return TSR_ERR(FORMAT, "%s: overlapping sections: section %zu (%s, [%" PRIu64 ", %"
                       PRIu64 ")) and section %zu (%s, [%" PRIu64 ", %" PRIu64 "))", what, i,
                       tsr_xclbin_kind_name(a->kind), a->offset, a->offset + a->size, j,
                       tsr_xclbin_kind_name(b->kind), b->offset, b->offset + b->size);
    }
  return TSR_OK;
}

static const tsr_xclbin_section_t *find_section(const tsr_xclbin_info_t *info, uint32_t kind) {
  for (size_t i = 0; i < info->n_sections; i++)
    if (info->sections[i].kind == kind) return &info->sections[i];
  return NULL;
}

/* A counted array section: int32 count at 0, `count` entries of `elem`
 * bytes from offset `first`. */
static tsr_status_t check_count(const uint8_t *d, const tsr_xclbin_section_t *s, size_t first,
                                size_t elem, const char *what, size_t *out_n) {
  *out_n = 0;
  if (s->size < 4)
    return TSR_ERR(FORMAT, "%s: malformed section %s at offset %" PRIu64 ": %" PRIu64
                   " bytes cannot hold its count", what, tsr_xclbin_kind_name(s->kind),
                   s->offset, s->size);
  int32_t count = (int32_t)tsr_get_le32(d + s->offset);
  if (count < 0 || (count > 0 && (s->size < first || (uint64_t)count > (s->size - first) / elem)))
    return TSR_ERR(FORMAT, "%s: malformed section %s at offset %" PRIu64 ": count %d of %zu-"
                   "byte entries does not fit in %" PRIu64 " bytes", what,
                   tsr_xclbin_kind_name(s->kind), s->offset, count, elem, s->size);
  *out_n = (size_t)count;
  return TSR_OK;
}

static tsr_status_t parse_payloads(const uint8_t *d, const char *what, tsr_xclbin_info_t *info) {
  const tsr_xclbin_section_t *s;
  size_t n;
  if ((s = find_section(info, TSR_AXLF_MEM_TOPOLOGY))) {
    TSR_RETURN_IF(check_count(d, s, TSR_MEM_TOPO_HDR_BYTES, TSR_MEM_DATA_BYTES, what, &n));
    info->mem = calloc(n ? n : 1, sizeof *info->mem);
    if (!info->mem) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
    info->n_mem = n;
    for (size_t i = 0; i < n; i++) {
      const uint8_t *m = d + s->offset + TSR_MEM_TOPO_HDR_BYTES + i * TSR_MEM_DATA_BYTES;
      info->mem[i].type = m[0];
      info->mem[i].used = m[1];
      info->mem[i].size_kb = tsr_get_le64(m + 8);
      info->mem[i].base = tsr_get_le64(m + 16);
      memcpy(info->mem[i].tag, m + 24, 16);
      info->mem[i].tag[16] = '\0';
    }
  }
  if ((s = find_section(info, TSR_AXLF_IP_LAYOUT))) {
    TSR_RETURN_IF(check_count(d, s, TSR_IP_LAYOUT_HDR_BYTES, TSR_IP_DATA_BYTES, what, &n));
    info->ip = calloc(n ? n : 1, sizeof *info->ip);
    if (!info->ip) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
    info->n_ip = n;
    for (size_t i = 0; i < n; i++) {
      const uint8_t *p = d + s->offset + TSR_IP_LAYOUT_HDR_BYTES + i * TSR_IP_DATA_BYTES;
      info->ip[i].type = tsr_get_le32(p);
      info->ip[i].properties = tsr_get_le32(p + 4);
      info->ip[i].base = tsr_get_le64(p + 8);
      memcpy(info->ip[i].name, p + 16, 64);
      info->ip[i].name[64] = '\0';
    }
  }
  if ((s = find_section(info, TSR_AXLF_CONNECTIVITY))) {
    TSR_RETURN_IF(check_count(d, s, TSR_CONNECTIVITY_HDR_BYTES, TSR_CONNECTION_BYTES, what, &n));
    info->conn = calloc(n ? n : 1, sizeof *info->conn);
    if (!info->conn) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
    info->n_conn = n;
    for (size_t i = 0; i < n; i++) {
      const uint8_t *c = d + s->offset + TSR_CONNECTIVITY_HDR_BYTES + i * TSR_CONNECTION_BYTES;
      tsr_xclbin_conn_t *k = &info->conn[i];
      k->arg_index = (int32_t)tsr_get_le32(c);
      k->ip_index = (int32_t)tsr_get_le32(c + 4);
      k->mem_index = (int32_t)tsr_get_le32(c + 8);
      if (k->ip_index < 0 || (size_t)k->ip_index >= info->n_ip || k->mem_index < 0 ||
          (size_t)k->mem_index >= info->n_mem || k->arg_index < 0)
        return TSR_ERR(FORMAT, "%s: malformed section CONNECTIVITY at offset %" PRIu64
                       ": connection %zu (arg %d, ip %d, mem %d) refers outside IP_LAYOUT "
                       "(%zu entries) or MEM_TOPOLOGY (%zu entries)", what, s->offset, i,
                       k->arg_index, k->ip_index, k->mem_index, info->n_ip, info->n_mem);
    }
  }
  if ((s = find_section(info, TSR_AXLF_BITSTREAM))) info->bitstream_bytes = s->size;
  if ((s = find_section(info, TSR_AXLF_EMBEDDED_METADATA))) {
    info->kernels = calloc(TSR_XCLBIN_MAX_KERNELS, sizeof *info->kernels);
    if (!info->kernels) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
    size_t len = (size_t)s->size;
    const char *text = (const char *)d + s->offset;
    const char *nul = memchr(text, '\0', len);
    if (nul) len = (size_t)(nul - text);
    xml_t x = {.s = text, .n = len, .what = what, .base = s->offset, .info = info, .inst = -1};
    TSR_RETURN_IF(xml_parse(&x));
  }
  return TSR_OK;
}

tsr_status_t tsr_xclbin_parse(const uint8_t *d, size_t size, const char *what,
                              tsr_xclbin_info_t **out) {
  *out = NULL;
  if (!what) what = "xclbin";
  if (size < TSR_AXLF_OFF_SECTIONS)
    return TSR_ERR(FORMAT, "%s: truncated header: %zu bytes, the header alone needs %d",
                   what, size, (int)TSR_AXLF_OFF_SECTIONS);
  if (memcmp(d, "xclbin2", 8)) {
    char shown[9];
    for (int i = 0; i < 8; i++) shown[i] = (d[i] >= 32 && d[i] < 127) ? (char)d[i] : '.';
    shown[8] = '\0';
    return TSR_ERR(FORMAT, "%s: bad magic at offset 0: '%s' (expected \"xclbin2\" and a NUL)",
                   what, shown);
  }
  uint64_t length = tsr_get_le64(d + TSR_AXLF_OFF_LENGTH);
  if (length != size)
    return TSR_ERR(FORMAT, "%s: length mismatch: header m_length (offset %d) says %" PRIu64
                   " bytes, the file has %zu", what, (int)TSR_AXLF_OFF_LENGTH, length, size);
  uint32_t nsec = tsr_get_le32(d + TSR_AXLF_OFF_NUM_SECTIONS);
  if (nsec > TSR_AXLF_MAX_SECTIONS ||
      TSR_AXLF_OFF_SECTIONS + (uint64_t)nsec * TSR_AXLF_SECTION_HDR_BYTES > size)
    return TSR_ERR(FORMAT, "%s: section table out of range: %u section headers of %d bytes "
                   "from offset %d do not fit in %zu bytes", what, nsec,
                   (int)TSR_AXLF_SECTION_HDR_BYTES, (int)TSR_AXLF_OFF_SECTIONS, size);

  tsr_xclbin_info_t *info = calloc(1, sizeof *info);
  if (!info) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  info->length = length;
  info->timestamp = tsr_get_le64(d + TSR_AXLF_OFF_TIMESTAMP);
  info->unique_id = tsr_get_le64(d + TSR_AXLF_OFF_UNIQUE_ID);
  info->ver_major = d[TSR_AXLF_OFF_VER_MAJOR];
  info->ver_minor = d[TSR_AXLF_OFF_VER_MINOR];
  info->ver_patch = get16(d + TSR_AXLF_OFF_VER_PATCH);
  info->mode = get16(d + TSR_AXLF_OFF_MODE);
  memcpy(info->vbnv, d + TSR_AXLF_OFF_VBNV, 64);
  info->vbnv[64] = '\0';
  memcpy(info->uuid, d + TSR_AXLF_OFF_UUID, 16);
  info->n_sections = nsec;
  info->sections = calloc(nsec ? nsec : 1, sizeof *info->sections);
  if (!info->sections) {
    tsr_xclbin_info_free(info);
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  }
  tsr_status_t st = parse_sections(d, size, what, info);
  if (!st) st = parse_payloads(d, what, info);
  if (st) {
    tsr_xclbin_info_free(info);
    return st;
  }
  *out = info;
  return TSR_OK;
}

tsr_status_t tsr_xclbin_read_file(const char *path, tsr_xclbin_info_t **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return TSR_ERR(NOT_FOUND, "xclbin '%s': %s", path, strerror(errno));
  uint8_t *data = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 1 << 16;
      uint8_t *p = realloc(data, nc);
      if (!p) {
        free(data);
        fclose(f);
        return TSR_ERR(RESOURCE_EXHAUSTED, "xclbin '%s': out of memory", path);
      }
      data = p;
      cap = nc;
    }
    size_t got = fread(data + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  bool err = ferror(f) != 0;
  fclose(f);
  if (err) {
    free(data);
    return TSR_ERR(IO, "xclbin '%s': read error", path);
  }
  tsr_status_t st = tsr_xclbin_parse(data, n, path, out);
  free(data);
  return st;
}

/* ---- queries ------------------------------------------------------------ */

const tsr_xclbin_kernel_t *tsr_xclbin_find_kernel(const tsr_xclbin_info_t *info,
                                                  const char *name) {
  if (!info || !info->kernels) return NULL;
  if (!name) return info->n_kernels == 1 ? &info->kernels[0] : NULL;
  for (size_t i = 0; i < info->n_kernels; i++)
    if (!strcmp(info->kernels[i].name, name)) return &info->kernels[i];
  return NULL;
}

tsr_xclbin_ctrl_t tsr_xclbin_kernel_ctrl(const tsr_xclbin_info_t *info,
                                         const tsr_xclbin_kernel_t *k) {
  size_t kl = strlen(k->name);
  for (size_t i = 0; i < info->n_ip; i++)
    if (info->ip[i].type == TSR_IP_KERNEL && !strncmp(info->ip[i].name, k->name, kl) &&
        info->ip[i].name[kl] == ':')
      return (tsr_xclbin_ctrl_t)((info->ip[i].properties & TSR_IP_CONTROL_MASK) >>
                                 TSR_IP_CONTROL_SHIFT);
  if (!strcmp(k->protocol, "ap_ctrl_chain")) return TSR_XCLBIN_CTRL_CHAIN;
  if (!strcmp(k->protocol, "ap_ctrl_none")) return TSR_XCLBIN_CTRL_NONE;
  return TSR_XCLBIN_CTRL_HS;
}

tsr_status_t tsr_xclbin_check_regmap(const tsr_xclbin_kernel_t *k) {
  size_t n = 0;
  const tsr_regmap_arg_t *ra = tsr_regmap_args(&n);
  if (k->n_args != n)
    return TSR_ERR(FORMAT, "kernel '%s' declares %zu arguments, hw/regmap.def has %zu",
                   k->name, k->n_args, n);
  for (size_t i = 0; i < n; i++) {
    const tsr_xclbin_arg_t *g = &k->args[i];
    if (strcasecmp(g->name, ra[i].name) || g->id != (int32_t)i || g->offset != ra[i].offset ||
        g->size != ra[i].bytes || (g->addr_qual == 1) != ra[i].is_ptr)
      return TSR_ERR(FORMAT, "kernel '%s' argument %zu is '%s' id %d offset 0x%" PRIx64
                     " size %" PRIu64 " addressQualifier %u; hw/regmap.def says '%s' id %zu "
                     "offset 0x%x size %u %s", k->name, i, g->name, g->id, g->offset, g->size,
                     g->addr_qual, ra[i].name, i, ra[i].offset, ra[i].bytes,
                     ra[i].is_ptr ? "pointer (1)" : "scalar (0)");
  }
  return TSR_OK;
}

void tsr_xclbin_print(const tsr_xclbin_info_t *info, FILE *f) {
  char uuid[37];
  const uint8_t *u = info->uuid;
  snprintf(uuid, sizeof uuid,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
           u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
           u[15]);
  fprintf(f, "header\n");
  fprintf(f, "  length      %" PRIu64 " bytes\n", info->length);
  fprintf(f, "  version     %u.%u.%u\n", info->ver_major, info->ver_minor, info->ver_patch);
  fprintf(f, "  timestamp   %" PRIu64 "\n", info->timestamp);
  fprintf(f, "  mode        %u\n", info->mode);
  fprintf(f, "  platform    %s\n", info->vbnv);
  fprintf(f, "  uuid        %s\n", uuid);
  fprintf(f, "sections (%zu)\n", info->n_sections);
  for (size_t i = 0; i < info->n_sections; i++) {
    const tsr_xclbin_section_t *s = &info->sections[i];
    fprintf(f, "  %2zu %-20s %-16s offset %8" PRIu64 "  size %8" PRIu64 "\n", i,
            tsr_xclbin_kind_name(s->kind), s->name, s->offset, s->size);
  }
  if (info->n_mem) fprintf(f, "memory banks (%zu)\n", info->n_mem);
  for (size_t i = 0; i < info->n_mem; i++)
    fprintf(f, "  %2zu %-16s type %u %s base 0x%" PRIx64 " size %" PRIu64 " KiB\n", i,
            info->mem[i].tag, info->mem[i].type, info->mem[i].used ? "used  " : "unused",
            info->mem[i].base, info->mem[i].size_kb);
  if (info->n_ip) fprintf(f, "ip layout (%zu)\n", info->n_ip);
  for (size_t i = 0; i < info->n_ip; i++) {
    const tsr_xclbin_ip_t *p = &info->ip[i];
    fprintf(f, "  %2zu %-32s type %u base 0x%" PRIx64, i, p->name, p->type, p->base);
    if (p->type == TSR_IP_KERNEL)
      fprintf(f, " %s irq %s", tsr_xclbin_ctrl_name((p->properties & TSR_IP_CONTROL_MASK) >>
                                                    TSR_IP_CONTROL_SHIFT),
              (p->properties & TSR_IP_INT_ENABLE_MASK) ? "on" : "off");
    fprintf(f, "\n");
  }
  if (info->n_conn) fprintf(f, "connectivity (%zu)\n", info->n_conn);
  for (size_t i = 0; i < info->n_conn; i++)
    fprintf(f, "  arg %d of ip %d -> bank %d\n", info->conn[i].arg_index,
            info->conn[i].ip_index, info->conn[i].mem_index);
  if (info->bitstream_bytes)
    fprintf(f, "bitstream   %" PRIu64 " bytes\n", info->bitstream_bytes);
  fprintf(f, "kernels (%zu)\n", info->n_kernels);
  for (size_t k = 0; k < info->n_kernels; k++) {
    const tsr_xclbin_kernel_t *kn = &info->kernels[k];
    fprintf(f, "  %s  %s\n", kn->name, tsr_xclbin_ctrl_name(tsr_xclbin_kernel_ctrl(info, kn)));
    for (size_t i = 0; i < kn->n_ports; i++)
      fprintf(f, "    port %-16s %-6s width %u range 0x%" PRIx64 "\n", kn->ports[i].name,
              kn->ports[i].mode, kn->ports[i].data_width, kn->ports[i].range);
    for (size_t i = 0; i < kn->n_args; i++) {
      const tsr_xclbin_arg_t *g = &kn->args[i];
      fprintf(f, "    arg %2d %-12s offset 0x%02" PRIx64 " size %" PRIu64 " %-7s %-14s %s\n",
              g->id, g->name, g->offset, g->size, g->addr_qual == 1 ? "global" : g->addr_qual == 0 ? "scalar" : "other",
              g->port, g->type);
    }
    for (size_t i = 0; i < kn->n_inst; i++)
      fprintf(f, "    instance %s base 0x%" PRIx64 "\n", kn->inst[i], kn->inst_base[i]);
  }
}
