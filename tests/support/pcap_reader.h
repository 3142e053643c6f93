// Reads classic pcap files (not pcapng) and picks out RoCEv2 packets, for tests:
// the golden vectors of tests/data, captures softrdma writes, captures of tshark runs.
// Each RoCEv2 packet comes with the IP/UDP facts a receiving socket would not see
// (IPv4 Identification, DF, TTL, TOS), so a test can check its ICRC exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wire/ip_udp.h"

namespace softrdma::test {

// LINKTYPE_* values of the pcap format (tcpdump.org/linktypes.html).
namespace link_type {
inline constexpr uint32_t kNull = 0;        // BSD loopback: 4-byte address family
inline constexpr uint32_t kEthernet = 1;
inline constexpr uint32_t kRaw = 101;       // IPv4 or IPv6, no link header
inline constexpr uint32_t kLinuxSll = 113;  // Linux cooked capture ("any" device)
inline constexpr uint32_t kIpv4 = 228;
inline constexpr uint32_t kIpv6 = 229;
inline constexpr uint32_t kLinuxSll2 = 276;
}  // namespace link_type

struct PcapRecord {
  uint64_t timestamp_ns = 0;
  uint32_t original_length = 0;    // on the wire; data may hold fewer bytes (snaplen)
  std::span<const uint8_t> data;   // views the reader's buffer
};

// A whole capture file held in memory, read record by record.
class PcapReader {
 public:
  explicit PcapReader(const std::string& path);
  explicit PcapReader(std::vector<uint8_t> file_bytes);

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  uint32_t link_type() const { return link_type_; }

  // The next record; false at the end of the file or at a damaged record (then
  // error() says what).
  bool next(PcapRecord& out);

 private:
  void read_file_header();
  uint32_t u32(size_t at) const;

  std::vector<uint8_t> bytes_;
  std::string error_;
  size_t at_ = 0;
  bool swapped_ = false;     // file written on a machine of the other byte order
  bool nanoseconds_ = false;
  uint32_t link_type_ = 0;
};

// One RoCEv2 packet out of a capture.
struct RoceFrame {
  wire::IpUdpInfo ip;                // addresses, ports, ID, DF, TTL, TOS as captured
  std::vector<uint8_t> udp_payload;  // BTH .. ICRC
  size_t record_index = 0;           // 0-based record number in the file
  uint64_t timestamp_ns = 0;
};

// The UDP datagram to `port` carried by a frame of `link_type`, or nullopt when the
// frame is something else or cannot be described by IpUdpInfo alone (IPv4 options,
// IPv6 extension headers, fragments) or was cut short by the capture's snaplen.
std::optional<RoceFrame> decode_udp_frame(uint32_t link_type, std::span<const uint8_t> frame,
                                          uint16_t port = wire::kRoceUdpPort);

struct RoceCapture {
  std::vector<RoceFrame> packets;
  size_t records = 0;  // all records of the file, RoCEv2 or not
  std::string error;   // empty when the whole file was read
};
RoceCapture read_roce_pcap(const std::string& path, uint16_t port = wire::kRoceUdpPort);
RoceCapture read_roce_pcap(std::vector<uint8_t> file_bytes, uint16_t port = wire::kRoceUdpPort);

}  // namespace softrdma::test
