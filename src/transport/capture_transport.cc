// CaptureTransport (declared in pcap_writer.h): the decorator that feeds a PcapWriter.
#include "transport/pcap_writer.h"

namespace softrdma::transport {

CaptureTransport::CaptureTransport(std::unique_ptr<Transport> inner,
                                   std::shared_ptr<PcapWriter> writer)
    : inner_(std::move(inner)), writer_(std::move(writer)) {}

size_t CaptureTransport::tx_burst(std::span<TxPacket> packets) {
  return tx_burst_with_errors(packets, {});
}

size_t CaptureTransport::tx_burst_with_errors(std::span<TxPacket> packets,
                                              std::span<const BitError> errors) {
  const size_t taken = inner_->tx_burst_with_errors(packets, errors);
  const uint16_t port = inner_->udp_port();
  for (size_t i = 0; i < taken; ++i) {
    const TxPacket& p = packets[i];
    // What the kernel sends for softrdma's unconnected DF sockets: ID 0, or the
    // segment's index in a GSO send (TxPacket::ipv4_id).
    const wire::IpUdpInfo info{.src = p.src, .dst = p.dst, .src_port = p.src_port,
                               .dst_port = port, .ipv4_id = p.ipv4_id, .ipv4_df = true,
                               .tos = inner_->tx_tos()};
    const BitError* error = nullptr;
    for (const BitError& e : errors)
      if (e.packet == i) error = &e;
    writer_->write_roce(info, p.bytes, error);
  }
  return taken;
}

size_t CaptureTransport::rx_burst(std::span<RxPacket> packets) {
  const size_t received = inner_->rx_burst(packets);
  const uint16_t port = inner_->udp_port();
  for (size_t i = 0; i < received; ++i) {
    const RxPacket& p = packets[i];
    // Of a received packet's ECN field only a CE mark is known (RxPacket).
    const wire::IpUdpInfo info{.src = p.src, .dst = p.dst, .src_port = p.src_port,
                               .dst_port = port, .ipv4_id = p.ipv4_id, .ipv4_df = p.ipv4_df,
                               .tos = p.congestion_experienced ? wire::kEcnCe : uint8_t(0)};
    writer_->write_roce(info, p.bytes);
  }
  return received;
}

std::string CaptureTransport::describe() const {
  return inner_->describe() + " captured to " + writer_->path();
}

std::unique_ptr<Transport> open_capture(std::unique_ptr<Transport>&& inner,
                                        const std::string& path, std::string& error) {
  std::shared_ptr<PcapWriter> writer = PcapWriter::open(path, error);
  if (!writer) return nullptr;
  return std::make_unique<CaptureTransport>(std::move(inner), std::move(writer));
}

}  // namespace softrdma::transport
