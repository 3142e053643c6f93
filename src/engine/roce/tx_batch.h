// RoCEv2's egress: outgoing packets are built in place in the family's buffers
// (roce/family.h) and handed to the transport one burst at a time (STYLE.md: one virtual call per burst; no malloc
// on the data path). Owner: the thread that holds the device's engine
// (docs/decisions/threading.md); it flushes at the end of its turn, so packets
// leave in the order they were built, whatever QP built them.
#pragma once

#include <array>
#include <cstdint>

#include "engine/counters.h"
#include "transport/transport.h"
#include "wire/packet.h"

namespace softrdma::engine::roce {

class TxBatch {
 public:
  static constexpr size_t kBurst = 32;
  static constexpr size_t kBufferBytes = 4096 + 128;  // path MTU 4096 + headers + ICRC

  explicit TxBatch(EngineCounters& counters) : counters_(counters) {}
  TxBatch(const TxBatch&) = delete;
  TxBatch& operator=(const TxBatch&) = delete;

  // Lays out a packet to leave through `via` and returns a view to fill in.
  // Flushes first if the batch is full or holds another transport's packets.
  wire::PacketView add(transport::Transport& via, uint8_t opcode, size_t payload_len,
                       const transport::Gid& src, const transport::Gid& dst,
                       uint16_t src_port);
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
  transport::Transport* transport_ = nullptr;  // of the packets in the batch
  EngineCounters& counters_;
};

}  // namespace softrdma::engine::roce
