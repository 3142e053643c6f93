#include "transport/pcap_writer.h"

#include <time.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace softrdma::transport {

namespace {

// The classic pcap format (https://www.tcpdump.org/manpages/pcap-savefile.5.html,
// IETF draft-ietf-opsawg-pcap): file header, then per packet a record header.
constexpr uint32_t kPcapMagicMicroseconds = 0xa1b2c3d4;  // written in host order
constexpr uint16_t kPcapVersionMajor = 2, kPcapVersionMinor = 4;
constexpr uint32_t kSnapLength = 262144;
constexpr uint32_t kLinkTypeEthernet = 1;  // LINKTYPE_ETHERNET

constexpr size_t kEthernetHeaderBytes = 14;
constexpr uint16_t kEtherTypeIpv4 = 0x0800, kEtherTypeIpv6 = 0x86dd;

struct FileHeader {
  uint32_t magic = kPcapMagicMicroseconds;
  uint16_t version_major = kPcapVersionMajor;
  uint16_t version_minor = kPcapVersionMinor;
  int32_t this_zone = 0;
  uint32_t sigfigs = 0;
  uint32_t snap_length = kSnapLength;
  uint32_t link_type = kLinkTypeEthernet;
};
static_assert(sizeof(FileHeader) == 24);

struct RecordHeader {
  uint32_t seconds;
  uint32_t microseconds;
  uint32_t captured_length;
  uint32_t original_length;
};
static_assert(sizeof(RecordHeader) == 16);

int64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A locally administered unicast MAC (IEEE 802: bit 1 of the first octet set, bit 0
// clear) made from the last five bytes of the address: stable and readable.
void synthetic_mac(const wire::Gid& gid, uint8_t* mac) {
  mac[0] = 0x02;
  std::memcpy(mac + 1, gid.data() + 11, 5);
}

void write_ethernet_header(const wire::IpUdpInfo& info, uint8_t* out) {
  synthetic_mac(info.dst, out);
  synthetic_mac(info.src, out + 6);
  const uint16_t type = info.ipv6() ? kEtherTypeIpv6 : kEtherTypeIpv4;
  out[12] = uint8_t(type >> 8);
  out[13] = uint8_t(type);
}

// RFC 1071: the 16-bit ones' complement sum of big-endian words, an odd last byte
// padded with zero. Returns the unfolded 32-bit sum.
uint32_t sum_words(std::span<const uint8_t> bytes, uint32_t sum = 0) {
  size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2) sum += uint32_t(bytes[i]) << 8 | bytes[i + 1];
  if (i < bytes.size()) sum += uint32_t(bytes[i]) << 8;
  return sum;
}

// The UDP checksum over IPv6 (RFC 8200 8.1: pseudo-header of addresses, length and
// next header). Linux computes it for every IPv6 datagram; tools flag 0 as illegal.
// `flip_at`/`flipped`: one payload byte differs from `payload` (injected corruption).
uint16_t ipv6_udp_checksum(const uint8_t* ipv6_header, std::span<const uint8_t> payload,
                           size_t flip_at, uint8_t flipped) {
  const uint8_t* udp = ipv6_header + wire::kIpv6HeaderBytes;
  const uint32_t udp_length = uint32_t(wire::kUdpHeaderBytes + payload.size());
  uint32_t sum = sum_words(std::span<const uint8_t>(ipv6_header + 8, 32));  // addresses
  sum += (udp_length >> 16) + (udp_length & 0xffff) + 17;                    // length, UDP
  sum = sum_words(std::span<const uint8_t>(udp, 6), sum);  // ports, length; checksum 0
  sum = sum_words(payload, sum);
  if (flip_at < payload.size()) {  // ones' complement: subtract the old word part, add the new
    const int shift = flip_at % 2 == 0 ? 8 : 0;
    sum += (~(uint32_t(payload[flip_at]) << shift) & 0xffff) + (uint32_t(flipped) << shift);
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const uint16_t checksum = uint16_t(~sum);
  return checksum == 0 ? 0xffff : checksum;  // RFC 768: 0 would mean "none"
}

}  // namespace

std::shared_ptr<PcapWriter> PcapWriter::open(const std::string& path, std::string& error,
                                             FlushPolicy policy) {
  std::FILE* file = std::fopen(path.c_str(), "wbe");  // e: O_CLOEXEC
  if (file == nullptr) {
    error = "softrdma: cannot create capture file " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  const FileHeader header;
  if (std::fwrite(&header, sizeof header, 1, file) != 1 || std::fflush(file) != 0) {
    error = "softrdma: cannot write capture file " + path + ": " + std::strerror(errno);
    std::fclose(file);
    return nullptr;
  }
  return std::shared_ptr<PcapWriter>(new PcapWriter(file, path, policy));
}

PcapWriter::PcapWriter(std::FILE* file, std::string path, FlushPolicy policy)
    : file_(file), path_(std::move(path)), policy_(policy),
      last_flush_ns_(clock_ns(CLOCK_MONOTONIC)) {}

PcapWriter::~PcapWriter() { close(); }

void PcapWriter::write_roce(const wire::IpUdpInfo& info, std::span<const uint8_t> udp_payload,
                            const BitError* error) {
  std::array<uint8_t, kEthernetHeaderBytes + wire::kIpv6HeaderBytes + wire::kUdpHeaderBytes>
      headers;
  write_ethernet_header(info, headers.data());
  const size_t ip_udp = wire::build_ip_udp_headers(
      info, udp_payload.size(), std::span<uint8_t>(headers).subspan(kEthernetHeaderBytes));
  if (ip_udp == 0) return;  // larger than an IP datagram: never on a wire either
  const size_t header_bytes = kEthernetHeaderBytes + ip_udp;
  const size_t frame_bytes = header_bytes + udp_payload.size();
  const int64_t now = clock_ns(CLOCK_REALTIME);
  const RecordHeader record{uint32_t(now / 1'000'000'000), uint32_t(now % 1'000'000'000 / 1000),
                            uint32_t(frame_bytes), uint32_t(frame_bytes)};
  size_t flip_at = udp_payload.size();
  uint8_t flipped = 0;
  if (error != nullptr && error->mask != 0 && error->at < udp_payload.size()) {
    flip_at = error->at;
    flipped = udp_payload[flip_at] ^ error->mask;
  }
  if (info.ipv6()) {  // IPv4 keeps checksum 0: RFC 768 and RoCEv2 allow it
    const uint16_t checksum = ipv6_udp_checksum(headers.data() + kEthernetHeaderBytes,
                                                udp_payload, flip_at, flipped);
    uint8_t* field = headers.data() + header_bytes - 2;
    field[0] = uint8_t(checksum >> 8);
    field[1] = uint8_t(checksum);
  }

  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return;
  std::fwrite(&record, sizeof record, 1, file_);
  std::fwrite(headers.data(), 1, header_bytes, file_);
  std::fwrite(udp_payload.data(), 1, flip_at, file_);
  if (flip_at < udp_payload.size()) {
    std::fputc(flipped, file_);
    std::fwrite(udp_payload.data() + flip_at + 1, 1, udp_payload.size() - flip_at - 1, file_);
  }
  ++packets_;
  if (policy_ == FlushPolicy::kEachPacket) {
    std::fflush(file_);
  } else if (const int64_t mono = clock_ns(CLOCK_MONOTONIC);
             mono - last_flush_ns_ >= kFlushIntervalNs) {
    flush_locked(mono);
  }
}

void PcapWriter::flush_locked(int64_t now_ns) {
  if (file_ != nullptr) std::fflush(file_);
  last_flush_ns_ = now_ns;
}

void PcapWriter::flush() {
  std::lock_guard lock(mutex_);
  flush_locked(clock_ns(CLOCK_MONOTONIC));
}

void PcapWriter::close() {
  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return;
  std::fclose(file_);  // flushes
  file_ = nullptr;
}

uint64_t PcapWriter::packets_written() const {
  std::lock_guard lock(mutex_);
  return packets_;
}

}  // namespace softrdma::transport
