#include "engine/roce/tx_batch.h"

#include <cstring>

namespace softrdma::engine::roce {

wire::PacketView TxBatch::add(transport::Transport& via, uint8_t opcode, size_t payload_len,
                              const transport::Gid& src, const transport::Gid& dst,
                              uint16_t src_port) {
  if (count_ == kBurst || (count_ > 0 && transport_ != &via)) flush();
  transport_ = &via;
  auto& buffer = buffers_[count_];
  wire::PacketView view = wire::build_packet(buffer, opcode, payload_len);
  packets_[count_] = transport::TxPacket{view.bytes(), src, dst, src_port};
  ++count_;
  return view;
}

void TxBatch::repeat_last() {
  if (count_ == 0) return;
  const size_t from = count_ - 1;
  // A full batch goes out first; its buffers keep their bytes to copy from.
  if (count_ == kBurst) flush();
  transport::TxPacket copy = packets_[from];
  std::memcpy(buffers_[count_].data(), copy.bytes.data(), copy.bytes.size());
  copy.bytes = std::span(buffers_[count_].data(), copy.bytes.size());
  packets_[count_++] = copy;
}

void TxBatch::flush() {
  if (count_ == 0) return;
  size_t sent = transport_->tx_burst(std::span(packets_.data(), count_));
  bump(counters_.tx_packets, sent);
  // A refused packet is a lost packet: RC recovers it like any other loss.
  if (sent < count_) bump(counters_.tx_dropped, count_ - sent);
  count_ = 0;
}

}  // namespace softrdma::engine::roce
