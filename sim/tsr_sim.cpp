// tsr_sim.cpp - the Verilated tessera kernel behind the C ABI of tsr_sim.h.
//
// Each tsr_sim owns a VerilatedContext, the model, the device memory and an
// AXI4 slave model of that memory (latency, bandwidth, outstanding bursts,
// protocol checks). The clock is driven from here: every cycle the slave's
// outputs are set from its state, the model is evaluated, the handshakes seen
// before the rising edge are committed, and the edge is applied.
#include "tsr_sim.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "Vtsr_kernel.h"
#include "verilated.h"
#ifdef TSR_SIM_TRACE
#include "verilated_fst_c.h"
#endif
#if VM_COVERAGE
#include "verilated_cov.h"
#endif

#define TSR_EXPORT extern "C" __attribute__((visibility("default")))

#ifndef TSR_SIM_ROWS
#define TSR_SIM_ROWS 16
#endif
#ifndef TSR_SIM_COLS
#define TSR_SIM_COLS 16
#endif
#ifndef TSR_SIM_DATA_BYTES
#define TSR_SIM_DATA_BYTES 64
#endif
#ifndef TSR_SIM_PORTS
#define TSR_SIM_PORTS 1
#endif
static_assert(TSR_SIM_PORTS >= 1 && TSR_SIM_PORTS <= TSR_SIM_MAX_CH, "TSR_SIM_PORTS out of range");

namespace {

constexpr unsigned kBeat = TSR_SIM_DATA_BYTES;      // bytes per AXI beat
constexpr unsigned kWords = kBeat / 4;              // 32-bit words per beat
constexpr uint64_t kLiteTimeout = 1000;             // cycles for one register access
constexpr unsigned kPorts = TSR_SIM_PORTS;          // read masters = memory channels

struct Burst {
  uint64_t addr;
  unsigned beats;
  unsigned sent;
  uint64_t ready_at;  // cycle of the first beat
  bool bad;           // outside memory: answer DECERR
};

struct WBeat {
  uint8_t data[kBeat];
  uint64_t strb;
  bool last;
};

struct PendingB {
  uint64_t ready_at;
  bool bad;
};

}  // namespace

struct tsr_sim {
  tsr_sim_config_t cfg{};
  std::unique_ptr<VerilatedContext> ctx;
  std::unique_ptr<Vtsr_kernel> top;
#ifdef TSR_SIM_TRACE
  std::unique_ptr<VerilatedFstC> tfp;
  bool trace_open = false;
#endif
  std::string wave_path, coverage_path;
  uint8_t *mem = nullptr;
  uint64_t cycle = 0;
  // memory model state
  // one memory channel per read port: its bursts, bandwidth bucket, profile;
  // channel 0 also serves the writes
  struct Channel {
    std::deque<Burst> rq;      // accepted read bursts, in order
    int64_t tokens = 0;        // bandwidth bucket, bytes (may go negative)
    uint32_t latency = 0, bytes_per_cycle = 0;
  } ch[kPorts];
  std::deque<Burst> awq;       // accepted write bursts awaiting data
  std::deque<WBeat> wq;        // write beats awaiting their burst
  std::deque<PendingB> bq;     // write responses to send
  unsigned w_in_burst = 0;     // beats of awq.front() consumed
  std::string fault;           // first protocol violation
  bool lite_busy = false;
  // window watch (tsr_sim_watch): accesses outside [watch_lo, watch_hi)
  bool watching = false;
  unsigned __int128 watch_lo = 0, watch_hi = 0;  // the window, exact
  tsr_sim_stray_t stray{};

  ~tsr_sim() { free(mem); }
};

namespace {

void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

void fault(tsr_sim *s, const char *fmt, ...) {
  if (!s->fault.empty()) return;
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s->fault = "cycle " + std::to_string(s->cycle) + ": " + buf;
}

bool in_mem(const tsr_sim *s, uint64_t addr, uint64_t n) {
  return addr >= s->cfg.mem_base && n <= s->cfg.mem_size &&
         addr - s->cfg.mem_base <= s->cfg.mem_size - n;
}

// Window watch. Reads are full bus words, so a read burst is stray when it
// reaches past the window rounded out to bus words; a write is stray when a
// strobed byte lies outside the window itself.
void note_stray(tsr_sim *s, bool write, uint64_t addr) {
  if (s->stray.reads + s->stray.writes == 0) {
    s->stray.first_addr = addr;
    s->stray.first_cycle = s->cycle;
    s->stray.first_is_write = write;
  }
  if (write) s->stray.writes++;
  else s->stray.reads++;
}

void watch_read(tsr_sim *s, uint64_t addr, uint64_t n) {
  if (!s->watching) return;
  unsigned __int128 lo = s->watch_lo / kBeat * kBeat;
  unsigned __int128 hi = (s->watch_hi + kBeat - 1) / kBeat * kBeat;
  if (addr < lo || (unsigned __int128)addr + n > hi) note_stray(s, false, addr);
}

void watch_write(tsr_sim *s, uint64_t addr, uint64_t strb) {
  if (!s->watching || !strb) return;
  for (unsigned i = 0; i < kBeat; i++) {
    unsigned __int128 a = (unsigned __int128)addr + i;
    if ((strb >> i & 1) && (a < s->watch_lo || a >= s->watch_hi)) {
      note_stray(s, true, addr + i);
      return;
    }
  }
}

void trace_dump(tsr_sim *s, uint64_t t) {
#ifdef TSR_SIM_TRACE
  if (s->tfp && s->cycle >= s->cfg.wave_start && s->cycle <= s->cfg.wave_end) s->tfp->dump(t);
#else
  (void)s;
  (void)t;
#endif
}

// AXI4 burst legality: INCR, full-width beats, aligned, inside one 4 KiB page.
bool check_burst(tsr_sim *s, const char *ch, uint64_t addr, unsigned len, unsigned size,
                 unsigned burst) {
  if (burst != 1) return fault(s, "%s burst type %u is not INCR", ch, burst), false;
  if ((1u << size) != kBeat)
    return fault(s, "%s size %u is not the bus width (%u bytes)", ch, size, kBeat), false;
  if (addr % kBeat) return fault(s, "%s address 0x%llx not aligned to the bus width", ch,
                                 (unsigned long long)addr), false;
  if ((addr & 4095) + (uint64_t)(len + 1) * kBeat > 4096)
    return fault(s, "%s burst at 0x%llx of %u beats crosses a 4 KiB boundary", ch,
                 (unsigned long long)addr, len + 1), false;
  return true;
}

// Access to the read ports: port 0 is m_axi_gmem, port p > 0 lane p-1 of the
// flat m_axi_gmemx vectors (an integer or a VlWide, by width).
template <typename T>
uint64_t lane_get(const T &v, unsigned lane, unsigned w) {
  if constexpr (std::is_integral<T>::value) {
    return (uint64_t)(v >> (lane * w)) & (w == 64 ? ~0ull : ((1ull << w) - 1));
  } else {
    uint64_t r = 0;
    for (unsigned i = 0; i < w; i++) {
      unsigned b = lane * w + i;
      r |= (uint64_t)(v[b / 32] >> (b % 32) & 1) << i;
    }
    return r;
  }
}
template <typename T>
void lane_set(T &v, unsigned lane, unsigned w, uint64_t x) {
  if constexpr (std::is_integral<T>::value) {
    uint64_t m = (w == 64 ? ~0ull : ((1ull << w) - 1)) << (lane * w);
    v = (T)((v & ~m) | ((x << (lane * w)) & m));
  } else {
    for (unsigned i = 0; i < w; i++) {
      unsigned b = lane * w + i;
      v[b / 32] = (v[b / 32] & ~(1u << (b % 32))) | ((uint32_t)(x >> i & 1) << (b % 32));
    }
  }
}

struct ArReq {
  bool valid;
  uint64_t addr;
  unsigned len, size, burst;
};

ArReq port_ar(Vtsr_kernel *t, unsigned p) {
  if (p == 0)
    return {(bool)t->m_axi_gmem_arvalid, (uint64_t)t->m_axi_gmem_araddr, t->m_axi_gmem_arlen,
            t->m_axi_gmem_arsize, t->m_axi_gmem_arburst};
  unsigned l = p - 1;
  return {(bool)lane_get(t->m_axi_gmemx_arvalid, l, 1), lane_get(t->m_axi_gmemx_araddr, l, 64),
          (unsigned)lane_get(t->m_axi_gmemx_arlen, l, 8),
          (unsigned)lane_get(t->m_axi_gmemx_arsize, l, 3),
          (unsigned)lane_get(t->m_axi_gmemx_arburst, l, 2)};
}
bool port_arready(Vtsr_kernel *t, unsigned p) {
  return p == 0 ? t->m_axi_gmem_arready : lane_get(t->m_axi_gmemx_arready, p - 1, 1);
}
bool port_rvalid(Vtsr_kernel *t, unsigned p) {
  return p == 0 ? t->m_axi_gmem_rvalid : lane_get(t->m_axi_gmemx_rvalid, p - 1, 1);
}
bool port_rready(Vtsr_kernel *t, unsigned p) {
  return p == 0 ? t->m_axi_gmem_rready : lane_get(t->m_axi_gmemx_rready, p - 1, 1);
}
void port_set_arready(Vtsr_kernel *t, unsigned p, bool v) {
  if (p == 0) t->m_axi_gmem_arready = v;
  else lane_set(t->m_axi_gmemx_arready, p - 1, 1, v);
}
void port_set_r(Vtsr_kernel *t, unsigned p, bool valid, const uint32_t *words, unsigned resp,
                bool last) {
  if (p == 0) {
    t->m_axi_gmem_rvalid = valid;
    if (!valid) return;
    for (unsigned w = 0; w < kWords; w++) t->m_axi_gmem_rdata[w] = words[w];
    t->m_axi_gmem_rresp = resp;
    t->m_axi_gmem_rlast = last;
    return;
  }
  unsigned l = p - 1;
  lane_set(t->m_axi_gmemx_rvalid, l, 1, valid);
  if (!valid) return;
  for (unsigned w = 0; w < kWords; w++) t->m_axi_gmemx_rdata[l * kWords + w] = words[w];
  lane_set(t->m_axi_gmemx_rresp, l, 2, resp);
  lane_set(t->m_axi_gmemx_rlast, l, 1, last);
}

// Sets the slave's outputs for the coming cycle from the model state.
void drive_inputs(tsr_sim *s) {
  Vtsr_kernel *t = s->top.get();
  for (unsigned p = 0; p < kPorts; p++) {
    tsr_sim::Channel &c = s->ch[p];
    port_set_arready(t, p, c.rq.size() < s->cfg.mem_max_outstanding);
    // Read data: head burst once its latency has passed and bandwidth allows.
    bool rv = false;
    uint32_t words[kWords];
    unsigned resp = 0;
    bool last = false;
    if (!c.rq.empty()) {
      const Burst &b = c.rq.front();
      if (s->cycle >= b.ready_at && c.tokens >= (int64_t)kBeat) {
        rv = true;
        uint64_t a = b.addr + (uint64_t)b.sent * kBeat;
        for (unsigned w = 0; w < kWords; w++) {
          uint32_t v = 0;
          if (!b.bad) memcpy(&v, s->mem + (a - s->cfg.mem_base) + 4 * w, 4);
          words[w] = v;
        }
        resp = b.bad ? 3 : 0;
        last = (b.sent + 1 == b.beats);
      }
    }
    port_set_r(t, p, rv, words, resp, last);
  }
  t->m_axi_gmem_awready = s->awq.size() < s->cfg.mem_max_outstanding;
  t->m_axi_gmem_wready = s->wq.size() < 512 && s->ch[0].tokens >= (int64_t)kBeat;
  bool bv = !s->bq.empty() && s->cycle >= s->bq.front().ready_at;
  t->m_axi_gmem_bvalid = bv;
  t->m_axi_gmem_bresp = bv && s->bq.front().bad ? 3 : 0;
}

// Applies the write beats that have their burst.
void drain_writes(tsr_sim *s) {
  while (!s->awq.empty() && !s->wq.empty()) {
    Burst &b = s->awq.front();
    WBeat &w = s->wq.front();
    uint64_t a = b.addr + (uint64_t)s->w_in_burst * kBeat;
    watch_write(s, a, w.strb);
    if (!b.bad)
      for (unsigned i = 0; i < kBeat; i++)
        if (w.strb >> i & 1) s->mem[a - s->cfg.mem_base + i] = w.data[i];
    bool last = ++s->w_in_burst == b.beats;
    if (w.last != last)
      fault(s, "WLAST %s on beat %u of a %u-beat write burst at 0x%llx",
            w.last ? "set" : "missing", s->w_in_burst, b.beats, (unsigned long long)b.addr);
    s->wq.pop_front();
    if (last) {
      s->bq.push_back({s->cycle + s->cfg.mem_latency / 2 + 1, b.bad});
      s->awq.pop_front();
      s->w_in_burst = 0;
    }
  }
}

// One clock cycle.
void step(tsr_sim *s) {
  Vtsr_kernel *t = s->top.get();
  // Bandwidth: each channel gets its bytes per cycle; channel 0 is shared by
  // the reads of port 0 and the writes.
  for (unsigned p = 0; p < kPorts; p++) {
    tsr_sim::Channel &c = s->ch[p];
    c.tokens += c.bytes_per_cycle;
    if (c.tokens > 2 * (int64_t)kBeat) c.tokens = 2 * (int64_t)kBeat;
  }
  drive_inputs(s);
  t->clk_i = 0;
  t->eval();
  trace_dump(s, 2 * s->cycle);
  // Handshakes seen before the edge.
  bool aw = t->m_axi_gmem_awvalid && t->m_axi_gmem_awready;
  bool w = t->m_axi_gmem_wvalid && t->m_axi_gmem_wready;
  bool b = t->m_axi_gmem_bvalid && t->m_axi_gmem_bready;
  for (unsigned p = 0; p < kPorts; p++) {
    tsr_sim::Channel &c = s->ch[p];
    ArReq ar = port_ar(t, p);
    bool r = port_rvalid(t, p) && port_rready(t, p);
    if (ar.valid && port_arready(t, p)) {
      char name[16];
      snprintf(name, sizeof name, p ? "AR%u" : "AR", p);
      check_burst(s, name, ar.addr, ar.len, ar.size, ar.burst);
      watch_read(s, ar.addr, (uint64_t)(ar.len + 1) * kBeat);
      c.rq.push_back({ar.addr, ar.len + 1, 0, s->cycle + c.latency,
                      !in_mem(s, ar.addr, (uint64_t)(ar.len + 1) * kBeat)});
    }
    if (r) {
      c.tokens -= kBeat;
      Burst &h = c.rq.front();
      if (++h.sent == h.beats) c.rq.pop_front();
    }
  }
  if (aw) {
    uint64_t a = t->m_axi_gmem_awaddr;
    unsigned len = t->m_axi_gmem_awlen;
    check_burst(s, "AW", a, len, t->m_axi_gmem_awsize, t->m_axi_gmem_awburst);
    s->awq.push_back({a, len + 1, 0, 0, !in_mem(s, a, (uint64_t)(len + 1) * kBeat)});
  }
  if (w) {
    s->ch[0].tokens -= kBeat;
    WBeat wb;
    for (unsigned i = 0; i < kWords; i++) memcpy(wb.data + 4 * i, &t->m_axi_gmem_wdata[i], 4);
    wb.strb = t->m_axi_gmem_wstrb;
    wb.last = t->m_axi_gmem_wlast;
    s->wq.push_back(wb);
  }
  if (b) s->bq.pop_front();
  drain_writes(s);
  t->clk_i = 1;
  t->eval();
  trace_dump(s, 2 * s->cycle + 1);
  s->cycle++;
}

bool rtl_failed(tsr_sim *s) {
  return s->ctx->gotError() || s->ctx->gotFinish() || !s->fault.empty();
}

void idle_lite(Vtsr_kernel *t) {
  t->s_axi_control_awvalid = 0;
  t->s_axi_control_wvalid = 0;
  t->s_axi_control_arvalid = 0;
  t->s_axi_control_bready = 0;
  t->s_axi_control_rready = 0;
}

}  // namespace

TSR_EXPORT void tsr_sim_config_init(tsr_sim_config_t *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  // Board profile: one DDR4-2400 x64 channel (19.2 GB/s) seen from a kernel
  // clocked at 300 MHz: 64 bytes per cycle peak; ~130 ns read latency through
  // the memory controller and interconnect; 16 bursts in flight.
  cfg->mem_base = 0x4000000000ull;
  cfg->mem_size = 256ull << 20;
  cfg->mem_latency = 40;
  cfg->mem_bytes_per_cycle = 64;
  cfg->mem_max_outstanding = 16;
  cfg->wave_path = nullptr;
  cfg->wave_start = 0;
  cfg->wave_end = 0;
  cfg->wave_depth = 0;
  cfg->coverage_path = nullptr;
}

TSR_EXPORT int tsr_sim_abi_version(void) { return TSR_SIM_ABI_VERSION; }

TSR_EXPORT void tsr_sim_reset(tsr_sim_t *s) {
  if (!s) return;
  Verilated::threadContextp(s->ctx.get());
  Vtsr_kernel *t = s->top.get();
  idle_lite(t);
  for (unsigned p = 0; p < kPorts; p++) s->ch[p].rq.clear();
  s->awq.clear();
  s->wq.clear();
  s->bq.clear();
  s->w_in_burst = 0;
  t->rst_ni = 0;
  for (int i = 0; i < 4; i++) step(s);
  t->rst_ni = 1;
  for (int i = 0; i < 2; i++) step(s);
}

TSR_EXPORT int tsr_sim_create(const tsr_sim_config_t *cfg_in, tsr_sim_t **out, char *err,
                              size_t errlen) {
  if (!out) {
    set_err(err, errlen, "tsr_sim_create: out is NULL");
    return -1;
  }
  *out = nullptr;
  tsr_sim_config_t cfg;
  tsr_sim_config_init(&cfg);
  if (cfg_in) cfg = *cfg_in;
  if (cfg.mem_size == 0 || cfg.mem_size > (64ull << 30)) {
    set_err(err, errlen, "tsr_sim_create: mem_size %llu out of range (1 .. 64 GiB)",
            (unsigned long long)cfg.mem_size);
    return -1;
  }
  if (cfg.mem_base % 4096 || cfg.mem_base + cfg.mem_size < cfg.mem_base) {
    set_err(err, errlen, "tsr_sim_create: mem_base 0x%llx must be 4 KiB aligned",
            (unsigned long long)cfg.mem_base);
    return -1;
  }
  if (cfg.mem_bytes_per_cycle == 0) cfg.mem_bytes_per_cycle = 64;
  if (cfg.mem_max_outstanding == 0) cfg.mem_max_outstanding = 1;
  for (unsigned p = 0; p < TSR_SIM_MAX_CH; p++) {
    if (cfg.ch_latency[p] == 0) cfg.ch_latency[p] = cfg.mem_latency;
    if (cfg.ch_bytes_per_cycle[p] == 0) cfg.ch_bytes_per_cycle[p] = cfg.mem_bytes_per_cycle;
  }
  if (cfg.wave_end == 0) cfg.wave_end = cfg.wave_start + 100000;
  tsr_sim *s = new (std::nothrow) tsr_sim;
  if (!s) {
    set_err(err, errlen, "tsr_sim_create: out of host memory");
    return -2;
  }
  try {
    s->cfg = cfg;
    for (unsigned p = 0; p < kPorts; p++) {
      s->ch[p].latency = p ? cfg.ch_latency[p] : cfg.mem_latency;
      s->ch[p].bytes_per_cycle = p ? cfg.ch_bytes_per_cycle[p] : cfg.mem_bytes_per_cycle;
    }
    s->mem = static_cast<uint8_t *>(calloc(1, cfg.mem_size));
    if (!s->mem) {
      set_err(err, errlen, "tsr_sim_create: cannot allocate %llu bytes of device memory",
              (unsigned long long)cfg.mem_size);
      delete s;
      return -2;
    }
    s->ctx.reset(new VerilatedContext);
    s->ctx->fatalOnError(false);
    s->ctx->fatalOnVpiError(false);
    Verilated::threadContextp(s->ctx.get());
    if (cfg.wave_path) s->wave_path = cfg.wave_path;
    if (cfg.coverage_path) s->coverage_path = cfg.coverage_path;
#ifdef TSR_SIM_TRACE
    if (!s->wave_path.empty()) s->ctx->traceEverOn(true);
#endif
    s->top.reset(new Vtsr_kernel(s->ctx.get(), "tsr"));
#ifdef TSR_SIM_TRACE
    if (!s->wave_path.empty()) {
      s->tfp.reset(new VerilatedFstC);
      s->top->trace(s->tfp.get(), cfg.wave_depth > 0 ? cfg.wave_depth : 99);
      s->tfp->open(s->wave_path.c_str());
      if (!s->tfp->isOpen()) {
        set_err(err, errlen, "tsr_sim_create: cannot open waveform file %s",
                s->wave_path.c_str());
        delete s;
        return -3;
      }
    }
#else
    if (!s->wave_path.empty()) {
      set_err(err, errlen, "tsr_sim_create: this library was built without tracing");
      delete s;
      return -3;
    }
#endif
  } catch (...) {
    set_err(err, errlen, "tsr_sim_create: the model could not be constructed");
    delete s;
    return -4;
  }
  s->top->clk_i = 0;
  s->top->rst_ni = 0;
  idle_lite(s->top.get());
  tsr_sim_reset(s);
  if (rtl_failed(s)) {
    set_err(err, errlen, "tsr_sim_create: the RTL stopped during reset");
    delete s;
    return -5;
  }
  *out = s;
  return 0;
}

TSR_EXPORT void tsr_sim_destroy(tsr_sim_t *s) {
  if (!s) return;
  Verilated::threadContextp(s->ctx.get());
  s->top->final();
#ifdef TSR_SIM_TRACE
  if (s->tfp) s->tfp->close();
#endif
#if VM_COVERAGE
  if (!s->coverage_path.empty()) s->ctx->coveragep()->write(s->coverage_path.c_str());
#endif
  delete s;
}

TSR_EXPORT int tsr_sim_reg_write(tsr_sim_t *s, uint32_t offset, uint32_t value) {
  if (!s) return -1;
  Verilated::threadContextp(s->ctx.get());
  Vtsr_kernel *t = s->top.get();
  t->s_axi_control_awvalid = 1;
  t->s_axi_control_awaddr = offset & 0xfff;
  t->s_axi_control_wvalid = 1;
  t->s_axi_control_wdata = value;
  t->s_axi_control_wstrb = 0xf;
  t->s_axi_control_bready = 1;
  int rc = -2;
  for (uint64_t i = 0; i < kLiteTimeout; i++) {
    t->clk_i = 0;
    drive_inputs(s);
    t->eval();
    bool aw = t->s_axi_control_awvalid && t->s_axi_control_awready;
    bool w = t->s_axi_control_wvalid && t->s_axi_control_wready;
    bool b = t->s_axi_control_bvalid && t->s_axi_control_bready;
    int resp = t->s_axi_control_bresp;
    step(s);
    if (aw) t->s_axi_control_awvalid = 0;
    if (w) t->s_axi_control_wvalid = 0;
    if (b) {
      rc = resp == 0 ? 0 : -3;
      break;
    }
    if (rtl_failed(s)) break;
  }
  idle_lite(t);
  if (offset > 0xfff) rc = -3;
  return rtl_failed(s) ? -4 : rc;
}

TSR_EXPORT int tsr_sim_reg_read(tsr_sim_t *s, uint32_t offset, uint32_t *value) {
  if (!s) return -1;
  Verilated::threadContextp(s->ctx.get());
  Vtsr_kernel *t = s->top.get();
  t->s_axi_control_arvalid = 1;
  t->s_axi_control_araddr = offset & 0xfff;
  t->s_axi_control_rready = 1;
  int rc = -2;
  for (uint64_t i = 0; i < kLiteTimeout; i++) {
    t->clk_i = 0;
    drive_inputs(s);
    t->eval();
    bool ar = t->s_axi_control_arvalid && t->s_axi_control_arready;
    bool r = t->s_axi_control_rvalid && t->s_axi_control_rready;
    uint32_t data = t->s_axi_control_rdata;
    int resp = t->s_axi_control_rresp;
    step(s);
    if (ar) t->s_axi_control_arvalid = 0;
    if (r) {
      if (value) *value = data;
      rc = resp == 0 ? 0 : -3;
      break;
    }
    if (rtl_failed(s)) break;
  }
  idle_lite(t);
  if (offset > 0xfff) rc = -3;
  return rtl_failed(s) ? -4 : rc;
}

TSR_EXPORT int tsr_sim_mem_write(tsr_sim_t *s, uint64_t addr, const void *src, size_t n) {
  if (!s || (!src && n)) return -1;
  if (!in_mem(s, addr, n)) return -2;
  if (n) memcpy(s->mem + (addr - s->cfg.mem_base), src, n);
  return 0;
}

TSR_EXPORT int tsr_sim_mem_read(tsr_sim_t *s, uint64_t addr, void *dst, size_t n) {
  if (!s || (!dst && n)) return -1;
  if (!in_mem(s, addr, n)) return -2;
  if (n) memcpy(dst, s->mem + (addr - s->cfg.mem_base), n);
  return 0;
}

TSR_EXPORT int tsr_sim_run(tsr_sim_t *s, uint64_t max_cycles, int stop_on_done, uint64_t *ran) {
  if (ran) *ran = 0;
  if (!s) return -1;
  Verilated::threadContextp(s->ctx.get());
  Vtsr_kernel *t = s->top.get();
  uint64_t n = 0;
  int rc = 0;
  for (; n < max_cycles; n++) {
    if (stop_on_done && t->ap_done_o) {
      rc = 1;
      break;
    }
    step(s);
    if (rtl_failed(s)) {
      rc = -2;
      n++;
      break;
    }
  }
  if (rc == 0 && stop_on_done && t->ap_done_o) rc = 1;
  if (ran) *ran = n;
  return rc;
}

TSR_EXPORT uint64_t tsr_sim_cycles(const tsr_sim_t *s) { return s ? s->cycle : 0; }

TSR_EXPORT int tsr_sim_irq(const tsr_sim_t *s) { return s ? s->top->interrupt_o : 0; }

TSR_EXPORT void tsr_sim_geometry(const tsr_sim_t *s, uint32_t *rows, uint32_t *cols) {
  (void)s;
  if (rows) *rows = TSR_SIM_ROWS;
  if (cols) *cols = TSR_SIM_COLS;
}

TSR_EXPORT unsigned tsr_sim_ports(const tsr_sim_t *s) {
  (void)s;
  return kPorts;
}

TSR_EXPORT int tsr_sim_watch(tsr_sim_t *s, uint64_t base, uint64_t size) {
  if (!s) return -1;
  s->watching = size != 0;
  s->watch_lo = base;
  s->watch_hi = (unsigned __int128)base + size;
  s->stray = tsr_sim_stray_t{};
  return 0;
}

TSR_EXPORT void tsr_sim_stray(const tsr_sim_t *s, tsr_sim_stray_t *out) {
  if (!out) return;
  *out = s ? s->stray : tsr_sim_stray_t{};
}

/* Extension (not in tsr_sim.h v1): the reason of the last failure, for tests. */
TSR_EXPORT const char *tsr_sim_last_error(const tsr_sim_t *s) {
  if (!s) return "no simulator";
  if (!s->fault.empty()) return s->fault.c_str();
  if (s->ctx->gotError()) return "an RTL assertion failed (see the simulator's output)";
  if (s->ctx->gotFinish()) return "the RTL called $finish";
  return "";
}
