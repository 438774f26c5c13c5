// Simulation harness around the Verilator model of vta_top, loaded from Python with ctypes.
//
// It plays the rest of the board: an AXI4 slave over a host buffer that is the DRAM
// (the numpy array of the Device), with the memory timing of the cycle model (a
// burst's first beat MEM_LATENCY cycles after its address, then one beat per cycle; a
// write's response MEM_LATENCY cycles after its last beat), and an AXI4-Lite master
// that writes the control registers.  The clock loop runs here, in C++, so Python
// only starts runs and reads results.
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>

#include "Vvta_top.h"
#include "verilated.h"
#if VM_TRACE && VTA_TRACE_VCD
#include "verilated_vcd_c.h"
using TraceFile = VerilatedVcdC;
#elif VM_TRACE
#include "verilated_fst_c.h"
using TraceFile = VerilatedFstC;
#endif

namespace {

constexpr int BUS = VTA_BUS_BYTES;

struct ReadBurst {
  uint64_t addr;
  uint32_t beats;
  uint32_t sent;
  uint64_t ready_at;
};

struct Sim {
  std::unique_ptr<VerilatedContext> ctx;
  std::unique_ptr<Vvta_top> top;
#if VM_TRACE
  std::unique_ptr<TraceFile> trace;
#endif
  uint8_t* dram = nullptr;
  uint64_t dram_size = 0;
  uint32_t latency = 0;
  uint64_t cycle = 0;
  std::deque<ReadBurst> reads;
  // write channel
  bool aw_open = false;
  uint64_t aw_addr = 0;
  uint32_t w_beats = 0;
  bool b_wait = false;
  uint64_t b_at = 0;
  bool b_error = false;
  // errors seen by the memory model
  bool mem_error = false;
  uint64_t mem_error_addr = 0;
  // the current run
  uint64_t begin = 0;
  uint64_t quiet = 0;
  bool moved = false;   // a memory handshake happened in the last cycle

  void tick() {
    auto* t = top.get();
    // drive this cycle's slave outputs from the model's state
    t->m_axi_arready = 1;
    if (!reads.empty() && cycle >= reads.front().ready_at) {
      ReadBurst& r = reads.front();
      uint64_t a = r.addr + uint64_t(r.sent) * BUS;
      bool ok = a + BUS <= dram_size;
      t->m_axi_rvalid = 1;
      t->m_axi_rlast = r.sent + 1 == r.beats;
      t->m_axi_rresp = ok ? 0 : 2;
      uint8_t beat[BUS];
      if (ok) std::memcpy(beat, dram + a, BUS);
      else std::memset(beat, 0, BUS);
      if (!ok && !mem_error) { mem_error = true; mem_error_addr = a; }
#if VTA_BUS_BYTES <= 8
      uint64_t word = 0;
      std::memcpy(&word, beat, BUS);
      t->m_axi_rdata = word;
#else
      for (int k = 0; k < BUS / 4; k++) std::memcpy(&t->m_axi_rdata[k], beat + 4 * k, 4);
#endif
    } else {
      t->m_axi_rvalid = 0;
      t->m_axi_rlast = 0;
      t->m_axi_rresp = 0;
    }
    t->m_axi_awready = !aw_open;
    t->m_axi_wready = !b_wait;   // write data may come with its address (never before it)
    t->m_axi_bvalid = b_wait && cycle >= b_at;
    t->m_axi_bresp = b_error ? 2 : 0;

    t->clk = 0;
    t->eval();
    // sample the master's outputs for the handshakes of this cycle
    bool ar = t->m_axi_arvalid && t->m_axi_arready;
    uint64_t ar_addr = t->m_axi_araddr;
    uint32_t ar_len = t->m_axi_arlen;
    bool r = t->m_axi_rvalid && t->m_axi_rready;
    bool aw = t->m_axi_awvalid && t->m_axi_awready;
    uint64_t aw_addr_now = t->m_axi_awaddr;
    bool w = t->m_axi_wvalid && t->m_axi_wready;
    bool w_last = t->m_axi_wlast;
    uint8_t wbeat[BUS];
    uint32_t strb = t->m_axi_wstrb;
    if (w) {
#if VTA_BUS_BYTES <= 8
      uint64_t word = t->m_axi_wdata;
      std::memcpy(wbeat, &word, BUS);
#else
      for (int k = 0; k < BUS / 4; k++) std::memcpy(wbeat + 4 * k, &t->m_axi_wdata[k], 4);
#endif
    }
    bool b = t->m_axi_bvalid && t->m_axi_bready;
    moved = ar || r || aw || w || b;

    t->clk = 1;
    t->eval();
#if VM_TRACE
    if (trace) {
      trace->dump(2 * cycle);
    }
#endif
    // the handshakes take effect at this edge
    if (r) {
      ReadBurst& rb = reads.front();
      if (++rb.sent == rb.beats) reads.pop_front();
    }
    if (ar) {
      reads.push_back({ar_addr, ar_len + 1, 0, cycle + latency});
      flag_range(ar_addr, ar_len + 1);
    }
    if (aw) {
      flag_range(aw_addr_now, 1);   // a write's length is its beats; each beat is checked below
      aw_open = true;
      aw_addr = aw_addr_now;
      w_beats = 0;
      b_error = false;
    }
    if (w) {
      uint64_t a = aw_addr + uint64_t(w_beats) * BUS;
      for (int k = 0; k < BUS; k++) {
        if (!((strb >> k) & 1)) continue;
        if (a + k < dram_size) dram[a + k] = wbeat[k];
        else {
          b_error = true;
          if (!mem_error) { mem_error = true; mem_error_addr = a + k; }
        }
      }
      w_beats++;
      if (w_last) {
        b_wait = true;
        b_at = cycle + latency;
      }
    }
    if (b) {
      b_wait = false;
      aw_open = false;
    }
    cycle++;
  }

  // The slave flags a burst that reaches past the DRAM image when its address is accepted,
  // so a bad access is reported even if the program reaches FINISH before its data moves.
  void flag_range(uint64_t addr, uint32_t beats) {
    uint64_t end = addr + uint64_t(beats) * BUS;
    if (end > dram_size && !mem_error) {
      mem_error = true;
      mem_error_addr = addr < dram_size ? dram_size : addr;
    }
  }

  // Memory traffic still in flight (reads not returned, a write not answered).
  bool mem_busy() const { return !reads.empty() || aw_open || b_wait; }

  void lite_write(uint32_t addr, uint32_t value) {
    auto* t = top.get();
    t->s_axil_awaddr = addr;
    t->s_axil_wdata = value;
    t->s_axil_awvalid = 1;
    t->s_axil_wvalid = 1;
    t->s_axil_bready = 1;
    for (int k = 0; k < 16 && !t->s_axil_awready; k++) tick();
    tick();
    t->s_axil_awvalid = 0;
    t->s_axil_wvalid = 0;
    for (int k = 0; k < 16 && !t->s_axil_bvalid; k++) tick();
    tick();
    t->s_axil_bready = 0;
  }

  uint32_t lite_read(uint32_t addr) {
    auto* t = top.get();
    t->s_axil_araddr = addr;
    t->s_axil_arvalid = 1;
    t->s_axil_rready = 1;
    for (int k = 0; k < 16 && !t->s_axil_arready; k++) tick();
    tick();
    t->s_axil_arvalid = 0;
    for (int k = 0; k < 16 && !t->s_axil_rvalid; k++) tick();
    uint32_t v = t->s_axil_rdata;
    tick();
    t->s_axil_rready = 0;
    return v;
  }
};

}  // namespace

extern "C" {

// Status codes of vta_run.
enum { RUN_FINISHED = 0, RUN_RTL_ERROR = 1, RUN_MEM_ERROR = 2, RUN_RUNNING = 3, RUN_HANG = 4 };

void* vta_create(uint8_t* dram, uint64_t dram_size, uint32_t latency) {
  auto* s = new Sim();
  s->ctx = std::make_unique<VerilatedContext>();
  s->top = std::make_unique<Vvta_top>(s->ctx.get());
  s->dram = dram;
  s->dram_size = dram_size;
  s->latency = latency < 1 ? 1 : latency;
  s->top->rst = 1;
  for (int k = 0; k < 4; k++) s->tick();
  s->top->rst = 0;
  s->tick();
  return s;
}

void vta_destroy(void* h) {
  auto* s = static_cast<Sim*>(h);
#if VM_TRACE
  if (s->trace) s->trace->close();
#endif
  s->top->final();
  delete s;
}

// Point the model at a (possibly moved) DRAM buffer.
void vta_set_dram(void* h, uint8_t* dram, uint64_t dram_size) {
  auto* s = static_cast<Sim*>(h);
  s->dram = dram;
  s->dram_size = dram_size;
}

int vta_trace_open(void* h, const char* path) {
#if VM_TRACE
  auto* s = static_cast<Sim*>(h);
  s->ctx->traceEverOn(true);
  s->trace = std::make_unique<TraceFile>();
  s->top->trace(s->trace.get(), 99);
  s->trace->open(path);
  return 1;
#else
  (void)h;
  (void)path;
  return 0;
#endif
}

void vta_write_reg(void* h, uint32_t addr, uint32_t value) { static_cast<Sim*>(h)->lite_write(addr, value); }

uint32_t vta_read_reg(void* h, uint32_t addr) { return static_cast<Sim*>(h)->lite_read(addr); }

// Start `insn_count` instructions at byte `insn_addr`; then call vta_step until it
// reports something other than RUN_RUNNING.
void vta_start(void* h, uint32_t insn_addr, uint32_t insn_count) {
  auto* s = static_cast<Sim*>(h);
  s->lite_write(0x0010, insn_count);
  s->lite_write(0x0018, insn_addr);
  s->mem_error = false;
  s->quiet = 0;
  s->lite_write(0x0000, 1);   // the register block raises start for one cycle after this write
  s->begin = s->cycle;        // the fetch module asks for its first burst in this cycle
}

// Run up to `max_cycles` more cycles: until FINISH, an error, or `hang_cycles` cycles
// without any activity.  *cycles receives the cycles since start.
int vta_step(void* h, uint64_t max_cycles, uint64_t hang_cycles, uint64_t* cycles, uint64_t* mem_error_addr) {
  auto* s = static_cast<Sim*>(h);
  int status = RUN_RUNNING;
  for (uint64_t k = 0; k < max_cycles; k++) {
    s->tick();
    auto* t = s->top.get();
    if (t->error) { status = RUN_RTL_ERROR; break; }   // an error wins over a FINISH in the same cycle
    if (t->finished) { status = RUN_FINISHED; break; }
    // Progress: the design moved something, memory moved a beat, or memory is still within
    // its latency.  Data offered but never taken, or a grant never used, is no progress.
    bool waiting = (!s->reads.empty() && s->cycle < s->reads.front().ready_at) || (s->b_wait && s->cycle < s->b_at);
    s->quiet = (t->progress || s->moved || waiting) ? 0 : s->quiet + 1;
    if (s->quiet >= hang_cycles) { status = RUN_HANG; break; }
  }
  *cycles = s->cycle - s->begin;
  // FINISH ends the compute queue, not the others: a LOAD or STORE the program did not
  // order before it may still be moving.  Let it drain (the run's cycles are counted at
  // FINISH) so that a bad access in it is still reported.
  if (status == RUN_FINISHED) {
    uint64_t quiet = 0;
    for (uint64_t k = 0; k < max_cycles && quiet < hang_cycles; k++) {
      s->tick();
      if (s->top->error) { status = RUN_RTL_ERROR; break; }
      quiet = (s->top->progress || s->moved || s->mem_busy()) ? 0 : quiet + 1;
      if (quiet > 2 * uint64_t(s->latency) + 8) break;   // idle: nothing left in flight
    }
  }
  *mem_error_addr = s->mem_error_addr;
  // The design flags bad accesses of its DMA engines itself (with the instruction); a
  // bad access it did not notice is still an error.
  if (s->mem_error && status != RUN_RTL_ERROR && status != RUN_RUNNING) status = RUN_MEM_ERROR;
  return status;
}

uint64_t vta_cycle(void* h) { return static_cast<Sim*>(h)->cycle; }

}  // extern "C"
