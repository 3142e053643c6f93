// Writes RoCEv2 packets to a pcap file (the classic libpcap format, Ethernet link
// type) that Wireshark/tshark decode as RoCEv2: synthetic MAC addresses, real
// IPv4/IPv6 + UDP headers (wire::build_ip_udp_headers) and the UDP payload as sent
// or received, so the ICRC of every packet checks against the headers in the file.
// Thread-safe; flushes each packet by default (a crash keeps what led to it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "transport/transport.h"
#include "wire/ip_udp.h"

namespace softrdma::transport {

class PcapWriter {
 public:
  enum class FlushPolicy : uint8_t {
    kEachPacket,  // fflush after every packet (the default: nothing lost on a crash)
    kPeriodic,    // at most every kFlushInterval, and on close
  };
  static constexpr int64_t kFlushIntervalNs = 100'000'000;

  // Creates (truncates) `path` and writes the file header. Null on failure, with
  // the reason in `error`.
  static std::shared_ptr<PcapWriter> open(const std::string& path, std::string& error,
                                          FlushPolicy policy = FlushPolicy::kEachPacket);
  ~PcapWriter();  // flushes and closes
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // One Ethernet frame carrying `udp_payload` in the IP/UDP headers `info`
  // describes. `error` (optional) is a bit error to show as it was on the wire
  // (BitError; the transport has already undone it in the buffer).
  void write_roce(const wire::IpUdpInfo& info, std::span<const uint8_t> udp_payload,
                  const BitError* error = nullptr);

  void flush();
  void close();
  uint64_t packets_written() const;
  const std::string& path() const { return path_; }

 private:
  PcapWriter(std::FILE* file, std::string path, FlushPolicy policy);
  void flush_locked(int64_t now_ns);

  mutable std::mutex mutex_;
  std::FILE* file_;  // guarded by mutex_; null once closed
  const std::string path_;
  const FlushPolicy policy_;
  int64_t last_flush_ns_ = 0;
  uint64_t packets_ = 0;
};

// A Transport decorator that writes every packet sent and received to a pcap file.
// tx: after the inner transport took the packet (so the ICRC and the source port
// actually used are known), with IPv4 ID 0 and DF, which is what Linux sends for
// softrdma's sockets (docs/decisions/transport.md). rx: with the IPv4 ID and DF
// solved from the ICRC, so the ICRC checks in the file too. Packets the inner
// transport dropped (bad ICRC, truncated) are not in the file.
// Put it closest to the wire (inside a FaultInjector) to see what the wire saw.
class CaptureTransport final : public Transport {
 public:
  CaptureTransport(std::unique_ptr<Transport> inner, std::shared_ptr<PcapWriter> writer);

  size_t tx_burst(std::span<TxPacket> packets) override;
  size_t tx_burst_with_errors(std::span<TxPacket> packets,
                              std::span<const BitError> errors) override;
  size_t rx_burst(std::span<RxPacket> packets) override;
  int rx_fd() const override { return inner_->rx_fd(); }
  Gid local_gid() const override { return inner_->local_gid(); }
  std::vector<Gid> local_gids() const override { return inner_->local_gids(); }
  bool refresh_addresses() override { return inner_->refresh_addresses(); }
  TransportCounters counters() const override { return inner_->counters(); }
  std::string describe() const override;
  uint16_t udp_port() const override { return inner_->udp_port(); }
  uint8_t tx_tos() const override { return inner_->tx_tos(); }
  int join_group(const Gid& group) override { return inner_->join_group(group); }
  int leave_group(const Gid& group) override { return inner_->leave_group(group); }

  Transport& inner() { return *inner_; }
  PcapWriter& writer() { return *writer_; }

 private:
  std::unique_ptr<Transport> inner_;
  std::shared_ptr<PcapWriter> writer_;
};

// Wraps `inner` in a CaptureTransport writing to `path` (SOFTRDMA_PCAP). On failure
// to create the file returns null with the reason in `error`, and leaves `inner`
// untouched (the caller may go on without capture).
std::unique_ptr<Transport> open_capture(std::unique_ptr<Transport>&& inner,
                                        const std::string& path, std::string& error);

}  // namespace softrdma::transport
