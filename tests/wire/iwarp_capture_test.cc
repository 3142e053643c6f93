// iWARP as Wireshark reads it: a TCP connection (written as a pcap of raw IPv4)
// carrying MPA's start frames and FPDUs of every RDMAP message softrdma builds
// with wire/iwarp, decoded by tshark's MPA, DDP and RDMAP dissectors — written
// from the RFCs by others — field for field, every CRC judged good. This is how
// the MPA CRC's byte order was settled: tshark called the network-order one bad.
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "wire/iwarp/ddp_rdmap.h"
#include "wire/iwarp/mpa.h"

namespace softrdma::wire::iwarp {
namespace {

using Bytes = std::vector<uint8_t>;

void put16(Bytes& b, uint16_t v) {
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}
void put32(Bytes& b, uint32_t v) {
  put16(b, uint16_t(v >> 16));
  put16(b, uint16_t(v));
}

// One direction of the connection: its address, port and next sequence number.
struct Side {
  std::array<uint8_t, 4> ip;
  uint16_t port;
  uint32_t seq;
};

// IPv4 + TCP (checksums left 0: tshark does not check them by default).
Bytes segment(Side& from, const Side& to, uint8_t flags, const Bytes& payload) {
  Bytes p;
  put16(p, 0x4500);
  put16(p, uint16_t(40 + payload.size()));
  put32(p, 0x00014000);  // ID 1, DF
  put16(p, 0x4006);      // TTL 64, TCP
  put16(p, 0);
  p.insert(p.end(), from.ip.begin(), from.ip.end());
  p.insert(p.end(), to.ip.begin(), to.ip.end());
  uint32_t sum = 0;
  for (size_t i = 0; i < 20; i += 2) sum += uint32_t(p[i] << 8 | p[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  p[10] = uint8_t(~sum >> 8);
  p[11] = uint8_t(~sum);
  put16(p, from.port);
  put16(p, to.port);
  put32(p, from.seq);
  put32(p, to.seq);
  p.push_back(5 << 4);
  p.push_back(flags);
  put16(p, 65535);
  put32(p, 0);
  p.insert(p.end(), payload.begin(), payload.end());
  from.seq += uint32_t(payload.size()) + ((flags & 0x02) != 0 ? 1 : 0);
  return p;
}

Bytes start_frame(bool reply) {
  const uint8_t ulp[] = {'s', 'o', 'f', 't'};
  MpaStart frame;
  frame.reply = reply;
  frame.crc = true;
  frame.revision = 2;
  frame.enhanced = MpaEnhanced{true, false, false, true, 16, 8};
  frame.private_data = ulp;
  Bytes out(64);
  out.resize(write_mpa_start(frame, out));
  return out;
}

// An FPDU of `header`, then `extra` (a READ request, a Terminate), then `payload`.
Bytes fpdu(const DdpHeader& header, const Bytes& extra, size_t payload) {
  Bytes ulpdu(kUntaggedHeaderBytes);
  ulpdu.resize(write_ddp(header, ulpdu));
  ulpdu.insert(ulpdu.end(), extra.begin(), extra.end());
  for (size_t i = 0; i < payload; ++i) ulpdu.push_back(uint8_t('a' + i % 26));
  Bytes out(fpdu_bytes(ulpdu.size()));
  std::memcpy(out.data() + kFpduHeaderBytes, ulpdu.data(), ulpdu.size());
  seal_fpdu(out, ulpdu.size(), true);
  return out;
}

std::vector<Bytes> conversation() {
  Side a{{10, 0, 0, 1}, 40000, 1000}, b{{10, 0, 0, 2}, 4800, 5000};
  std::vector<Bytes> packets;
  packets.push_back(segment(a, b, 0x02, {}));
  packets.push_back(segment(b, a, 0x12, {}));
  packets.push_back(segment(a, b, 0x10, {}));
  packets.push_back(segment(a, b, 0x18, start_frame(false)));
  packets.push_back(segment(b, a, 0x18, start_frame(true)));
  DdpHeader send;  // SEND, MSN 1
  send.msn = 1;
  packets.push_back(segment(a, b, 0x18, fpdu(send, {}, 12)));
  DdpHeader write;
  write.opcode = RdmapOpcode::kWrite;
  write.stag = 0x11223344;
  write.offset = 0x1000;
  packets.push_back(segment(a, b, 0x18, fpdu(write, {}, 20)));
  DdpHeader read;
  read.opcode = RdmapOpcode::kReadRequest;
  read.queue = kQueueReadRequest;
  read.msn = 1;
  Bytes request(kReadRequestBytes);
  write_read_request({0xaaaa0001, 0x2000, 4096, 0xbbbb0002, 0x3000},
                     std::span<uint8_t, kReadRequestBytes>(request.data(), kReadRequestBytes));
  packets.push_back(segment(a, b, 0x18, fpdu(read, request, 0)));
  DdpHeader response;
  response.opcode = RdmapOpcode::kReadResponse;
  response.stag = 0xaaaa0001;
  response.offset = 0x2000;
  packets.push_back(segment(b, a, 0x18, fpdu(response, {}, 16)));
  DdpHeader inval;
  inval.opcode = RdmapOpcode::kSendInvalidate;
  inval.invalidate_stag = 0xcccc0003;
  inval.msn = 2;
  packets.push_back(segment(a, b, 0x18, fpdu(inval, {}, 4)));
  DdpHeader term;
  term.opcode = RdmapOpcode::kTerminate;
  term.queue = kQueueTerminate;
  term.msn = 1;
  Bytes control(kTerminateControlBytes);
  write_terminate({TerminateLayer::kDdp, 1, 0, false, false},
                  std::span<uint8_t, kTerminateControlBytes>(control.data(), 4));
  packets.push_back(segment(b, a, 0x18, fpdu(term, control, 0)));
  return packets;
}

std::string write_pcap(const std::vector<Bytes>& packets) {
  char path[] = "/tmp/softrdma-iwarp-XXXXXX.pcap";
  const int fd = mkstemps(path, 5);
  if (fd < 0) return "";
  std::FILE* f = fdopen(fd, "wb");
  const uint32_t header[] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 101};  // LINKTYPE_RAW
  std::fwrite(header, sizeof header, 1, f);
  uint32_t i = 0;
  for (const Bytes& p : packets) {
    const uint32_t record[] = {1, i++, uint32_t(p.size()), uint32_t(p.size())};
    std::fwrite(record, sizeof record, 1, f);
    std::fwrite(p.data(), p.size(), 1, f);
  }
  std::fclose(f);
  return path;
}

std::string run(const std::string& command) {
  std::string out;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  pclose(pipe);
  return out;
}

TEST(IwarpCapture, TsharkDecodesEveryMessageFieldForFieldWithGoodCrcs) {
  const std::string path = write_pcap(conversation());
  ASSERT_FALSE(path.empty());
  // RPC-over-RDMA's heuristic would claim the SEND's letters as a malformed call.
  const std::string tshark = "tshark -n --disable-protocol rpcordma -r " + path;
  const std::string fields = run(
      tshark + " -T fields -E separator=, -e frame.number -e iwarp_mpa.rev -e iwarp_rdma.opcode"
               " -e iwarp_ddp.stag -e iwarp_ddp.tagged_offset -e iwarp_ddp.qn -e iwarp_ddp.msn"
               " -e iwarp_rdma.inval_stag -e iwarp_rdma.rdmardsz -e iwarp_rdma.srcstag"
               " -e iwarp_rdma.term_layer 2>/dev/null");
  const std::string verbose = run(tshark + " -V 2>/dev/null");
  ASSERT_FALSE(fields.empty()) << "tshark did not run";
  const char* expected[] = {
      "4,2",                                            // MPA request, revision 2
      "5,2",                                            // MPA reply
      "6,,0x03,,,0,1",                                  // SEND, queue 0, MSN 1
      "7,,0x00,0x11223344,0x0000000000001000",          // RDMA WRITE
      "8,,0x01,,,1,1,,4096,0xbbbb0002",                 // READ request, queue 1
      "9,,0x02,0xaaaa0001,0x0000000000002000",          // READ response
      "10,,0x04,,,0,2,3435921411",                      // SEND with Invalidate 0xcccc0003
      "11,,0x07,,,2,1,,,,0x01",                         // Terminate, queue 2, DDP layer
  };
  for (const std::string line : expected) {
    const std::string frame = line.substr(0, line.find(',') + 1);
    const size_t at = fields.find("\n" + frame);
    ASSERT_NE(at, std::string::npos) << frame << " in\n" << fields;
    std::string got = fields.substr(at + 1, fields.find('\n', at + 1) - at - 1);
    got.erase(got.find_last_not_of(',') + 1);  // empty fields at the end
    EXPECT_EQ(got, line);
  }
  size_t good = 0;
  for (size_t at = verbose.find("Good CRC32"); at != std::string::npos;
       at = verbose.find("Good CRC32", at + 1))
    ++good;
  EXPECT_EQ(good, 6u) << verbose;
  EXPECT_EQ(verbose.find("Bad CRC32"), std::string::npos);
  EXPECT_EQ(verbose.find("Malformed"), std::string::npos) << verbose;
  if (!HasFailure()) std::remove(path.c_str());  // kept for a look when it failed
}

}  // namespace
}  // namespace softrdma::wire::iwarp
