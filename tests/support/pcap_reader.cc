#include "support/pcap_reader.h"

#include <fstream>
#include <iterator>

namespace softrdma::test {

namespace {

// Classic pcap (the libpcap "savefile" format): a 24-byte file header, then per
// record a 16-byte header (seconds, sub-seconds, captured length, original length).
constexpr size_t kFileHeaderBytes = 24;
constexpr size_t kRecordHeaderBytes = 16;
constexpr uint32_t kMagicMicros = 0xa1b2c3d4;
constexpr uint32_t kMagicNanos = 0xa1b23c4d;
constexpr uint32_t kMagicPcapng = 0x0a0d0d0a;

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
constexpr uint16_t kEtherTypeVlan = 0x8100;
constexpr uint16_t kEtherTypeQinQ = 0x88a8;
constexpr size_t kEthernetHeaderBytes = 14;
constexpr size_t kVlanTagBytes = 4;
constexpr size_t kSllHeaderBytes = 16;
constexpr size_t kSll2HeaderBytes = 20;
constexpr size_t kNullHeaderBytes = 4;
constexpr uint8_t kIpProtoUdp = 17;

uint32_t byteswap32(uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
}

uint16_t be16(std::span<const uint8_t> b, size_t at) { return uint16_t(b[at] << 8 | b[at + 1]); }

std::vector<uint8_t> read_whole_file(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open " + path;
    return {};
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// An IP datagram carrying UDP: its header facts and the UDP header + payload.
struct UdpInIp {
  wire::IpUdpInfo ip;
  std::span<const uint8_t> udp;
};

// The UDP datagram inside an IPv4 datagram that IpUdpInfo describes fully.
std::optional<UdpInIp> decode_ipv4(std::span<const uint8_t> ip) {
  if (ip.size() < wire::kIpv4HeaderBytes) return std::nullopt;
  if (ip[0] != 0x45) return std::nullopt;  // version 4 without options only
  if (ip[9] != kIpProtoUdp) return std::nullopt;
  const uint16_t flags_fragment = be16(ip, 6);
  if ((flags_fragment & 0x3fff) != 0) return std::nullopt;  // MF or an offset: a fragment
  const size_t total = be16(ip, 2);
  if (total < wire::kIpv4HeaderBytes || total > ip.size()) return std::nullopt;
  UdpInIp f;
  f.ip.tos = ip[1];
  f.ip.ipv4_id = be16(ip, 4);
  f.ip.ipv4_df = (flags_fragment & 0x4000) != 0;
  f.ip.ttl = ip[8];
  f.ip.src = wire::gid_from_ipv4(uint32_t(be16(ip, 12)) << 16 | be16(ip, 14));
  f.ip.dst = wire::gid_from_ipv4(uint32_t(be16(ip, 16)) << 16 | be16(ip, 18));
  f.udp = ip.subspan(wire::kIpv4HeaderBytes, total - wire::kIpv4HeaderBytes);
  return f;
}

std::optional<UdpInIp> decode_ipv6(std::span<const uint8_t> ip) {
  if (ip.size() < wire::kIpv6HeaderBytes) return std::nullopt;
  if ((ip[0] >> 4) != 6 || ip[6] != kIpProtoUdp) return std::nullopt;  // no ext headers
  const size_t payload = be16(ip, 4);
  if (wire::kIpv6HeaderBytes + payload > ip.size()) return std::nullopt;
  UdpInIp f;
  f.ip.tos = uint8_t((ip[0] & 0x0f) << 4 | ip[1] >> 4);  // traffic class
  f.ip.ttl = ip[7];                                       // hop limit
  f.ip.ipv4_id = 0;
  f.ip.ipv4_df = false;
  std::copy(ip.begin() + 8, ip.begin() + 24, f.ip.src.begin());
  std::copy(ip.begin() + 24, ip.begin() + 40, f.ip.dst.begin());
  f.udp = ip.subspan(wire::kIpv6HeaderBytes, payload);
  return f;
}

// The frame of a UDP datagram to `port`; the UDP length field, not the IP one,
// bounds the payload.
std::optional<RoceFrame> decode_udp(const UdpInIp& d, uint16_t port) {
  if (d.udp.size() < wire::kUdpHeaderBytes) return std::nullopt;
  const size_t length = be16(d.udp, 4);
  if (length < wire::kUdpHeaderBytes || length > d.udp.size()) return std::nullopt;
  if (be16(d.udp, 2) != port) return std::nullopt;
  RoceFrame f;
  f.ip = d.ip;
  f.ip.src_port = be16(d.udp, 0);
  f.ip.dst_port = port;
  f.udp_payload.assign(d.udp.begin() + wire::kUdpHeaderBytes, d.udp.begin() + length);
  return f;
}

// The network-layer bytes of a frame and their ether type (0 when the version
// nibble decides), or an empty span for link layers this reader does not know.
std::span<const uint8_t> network_layer(uint32_t link, std::span<const uint8_t> frame,
                                       uint16_t& ether_type) {
  ether_type = 0;
  size_t skip = 0;
  switch (link) {
    case link_type::kEthernet:
      skip = kEthernetHeaderBytes;
      if (frame.size() < skip) return {};
      ether_type = be16(frame, 12);
      while ((ether_type == kEtherTypeVlan || ether_type == kEtherTypeQinQ) &&
             frame.size() >= skip + kVlanTagBytes) {
        ether_type = be16(frame, skip + 2);
        skip += kVlanTagBytes;
      }
      break;
    case link_type::kLinuxSll:
      skip = kSllHeaderBytes;
      if (frame.size() >= skip) ether_type = be16(frame, 14);
      break;
    case link_type::kLinuxSll2:
      skip = kSll2HeaderBytes;
      if (frame.size() >= skip) ether_type = be16(frame, 0);
      break;
    case link_type::kNull: skip = kNullHeaderBytes; break;
    case link_type::kRaw:
    case link_type::kIpv4:
    case link_type::kIpv6: break;
    default: return {};
  }
  if (frame.size() <= skip) return {};
  return frame.subspan(skip);
}

}  // namespace

PcapReader::PcapReader(const std::string& path) : bytes_(read_whole_file(path, error_)) {
  if (ok()) read_file_header();
}

PcapReader::PcapReader(std::vector<uint8_t> file_bytes) : bytes_(std::move(file_bytes)) {
  read_file_header();
}

uint32_t PcapReader::u32(size_t at) const {
  const uint32_t v = uint32_t(bytes_[at]) | uint32_t(bytes_[at + 1]) << 8 |
                     uint32_t(bytes_[at + 2]) << 16 | uint32_t(bytes_[at + 3]) << 24;
  return swapped_ ? byteswap32(v) : v;
}

void PcapReader::read_file_header() {
  if (bytes_.size() < kFileHeaderBytes) {
    error_ = "shorter than a pcap file header";
    return;
  }
  const uint32_t magic = u32(0);
  swapped_ = magic == byteswap32(kMagicMicros) || magic == byteswap32(kMagicNanos);
  const uint32_t native = swapped_ ? byteswap32(magic) : magic;
  if (native == kMagicPcapng) {
    error_ = "pcapng is not supported: convert with `editcap -F pcap`";
    return;
  }
  if (native != kMagicMicros && native != kMagicNanos) {
    error_ = "not a pcap file (bad magic)";
    return;
  }
  nanoseconds_ = native == kMagicNanos;
  link_type_ = u32(20) & 0xffff;  // upper bits may carry FCS information
  at_ = kFileHeaderBytes;
}

bool PcapReader::next(PcapRecord& out) {
  if (!ok() || at_ >= bytes_.size()) return false;
  if (bytes_.size() - at_ < kRecordHeaderBytes) {
    error_ = "truncated record header at byte " + std::to_string(at_);
    return false;
  }
  const uint64_t seconds = u32(at_);
  const uint64_t fraction = u32(at_ + 4);
  const uint32_t captured = u32(at_ + 8);
  const size_t data_at = at_ + kRecordHeaderBytes;
  if (bytes_.size() - data_at < captured) {
    error_ = "truncated record data at byte " + std::to_string(data_at);
    return false;
  }
  out.timestamp_ns = seconds * 1'000'000'000 + fraction * (nanoseconds_ ? 1 : 1000);
  out.original_length = u32(at_ + 12);
  out.data = std::span<const uint8_t>(bytes_.data() + data_at, captured);
  at_ = data_at + captured;
  return true;
}

std::optional<RoceFrame> decode_udp_frame(uint32_t link, std::span<const uint8_t> frame,
                                          uint16_t port) {
  uint16_t ether_type = 0;
  const std::span<const uint8_t> ip = network_layer(link, frame, ether_type);
  if (ip.empty()) return std::nullopt;
  const bool v4 = ether_type ? ether_type == kEtherTypeIpv4 : (ip[0] >> 4) == 4;
  const bool v6 = ether_type ? ether_type == kEtherTypeIpv6 : (ip[0] >> 4) == 6;
  const std::optional<UdpInIp> datagram =
      v4 ? decode_ipv4(ip) : v6 ? decode_ipv6(ip) : std::nullopt;
  if (!datagram) return std::nullopt;
  return decode_udp(*datagram, port);
}

RoceCapture read_roce_pcap(std::vector<uint8_t> file_bytes, uint16_t port) {
  RoceCapture capture;
  PcapReader reader(std::move(file_bytes));
  PcapRecord record;
  while (reader.next(record)) {
    // A record shorter than the frame was cut by the snaplen: its ICRC is gone.
    if (record.data.size() == record.original_length) {
      if (auto f = decode_udp_frame(reader.link_type(), record.data, port)) {
        f->record_index = capture.records;
        f->timestamp_ns = record.timestamp_ns;
        capture.packets.push_back(std::move(*f));
      }
    }
    ++capture.records;
  }
  capture.error = reader.error();
  return capture;
}

RoceCapture read_roce_pcap(const std::string& path, uint16_t port) {
  std::string error;
  std::vector<uint8_t> bytes = read_whole_file(path, error);
  if (!error.empty()) return RoceCapture{{}, 0, error};
  return read_roce_pcap(std::move(bytes), port);
}

}  // namespace softrdma::test
