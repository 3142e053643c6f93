// Outgoing packets are built in place in per-thread buffers and handed to the
// transport one burst at a time (STYLE.md: one virtual call per burst; no malloc
// on the data path). Whoever starts work (a posting thread, the progress loop)
// flushes at the end of it.
#pragma once

#include <array>
#include <cstdint>

#include "engine/counters.h"
#include "transport/transport.h"
#include "wire/packet.h"

namespace softrdma::engine {

class TxBatch {
 public:
  static constexpr size_t kBurst = 32;
  static constexpr size_t kBufferBytes = 4096 + 128;  // path MTU 4096 + headers + ICRC

  // The calling thread's batch.
  static TxBatch& local();

  // Lays out a packet for `transport` and returns a view to fill in. Flushes first
  // if the batch is full or was filled for another transport.
  wire::PacketView add(transport::Transport& transport, EngineCounters& counters,
                       uint8_t opcode, size_t payload_len, const transport::Gid& src,
                       const transport::Gid& dst, uint16_t src_port);
  // Takes back the packet add() returned last (it was never filled in).
  void discard_last() {
    if (count_ > 0) --count_;
  }
  // Queues a second copy of the packet add() returned last, once it is filled in.
  void repeat_last();
  void flush();

 private:
  std::array<std::array<uint8_t, kBufferBytes>, kBurst> buffers_;
  std::array<transport::TxPacket, kBurst> packets_;
  size_t count_ = 0;
  transport::Transport* transport_ = nullptr;
  EngineCounters* counters_ = nullptr;
};

}  // namespace softrdma::engine
