// libFuzzer entry for parse_packet and field reads, and for the CM MAD decoder
// (DESIGN.md §7: fuzz the parser).
// Built as its own binary with -DSOFTRDMA_FUZZ=ON under clang; also compiled into
// wire_test, where fuzz_parse_test.cc feeds it deterministic inputs.
#include "wire/fuzz_parse.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "wire/cm_gsi.h"
#include "wire/cm_ip.h"
#include "wire/icrc.h"
#include "wire/test_packets.h"

namespace softrdma::wire::testing {

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_parse: invariant broken: %s\n", what);
  std::abort();
}

uint64_t read_all_fields(const PacketView& p) {
  uint64_t sum = 0;
  for (size_t h = 0; h < kNumHeaders; ++h)
    if (p.info().has(Header(h)))
      for (const FieldSpec& f : header_fields(Header(h))) sum += p.get(f);
  for (uint8_t b : p.payload()) sum += b;
  for (uint8_t b : p.icrc_bytes()) sum += b;
  return sum;
}

}  // namespace

ParseError fuzz_parse_one(const uint8_t* data, size_t size) {
  // An exactly sized heap copy: a sanitizer sees any read past the end.
  std::vector<uint8_t> bytes(data, data + size);
  IpUdpInfo info;
  info.src = gid_from_ipv4(0x0a000001);
  info.dst = gid_from_ipv4(0x0a000002);
  // The receive path checks the ICRC of whatever arrives, parsed or not.
  (void)check_icrc(info, bytes);
  (void)solve_icrc_ipv4(info, bytes);

  PacketView view;
  const ParseError e = parse_packet(bytes, view);
  if (e != ParseError::kNone) return e;
  if (!view.info().valid()) broken("accepted an opcode outside the table");
  const size_t headers = view.info().header_bytes;
  if (headers + view.pad() + kIcrcBytes > size) broken("headers, pad and ICRC exceed the packet");
  if (headers + view.payload().size() + view.pad() + kIcrcBytes != size)
    broken("payload does not fill the space between headers and pad");
  (void)read_all_fields(view);
  // A MAD to QP1 goes on to the CM decoder, as the receive path will send it.
  if (const auto mad = gsi_mad(view); !mad.empty()) (void)fuzz_cm_mad_one(mad.data(), mad.size());

  const std::vector<uint8_t> rebuilt = reencode(view);
  const size_t compared = headers + view.payload().size();
  if (rebuilt.size() < compared) broken("re-encoded packet too short");
  if (!std::equal(bytes.begin(), bytes.begin() + compared, rebuilt.begin()))
    broken("re-encoding the decoded fields changed headers or payload");
  return e;
}

namespace {
template <class Msg>
void check_ip_cm_header(const Msg& m) {
  IpCmHeader ip;
  if (decode_ip_cm_header(m.private_data, ip) != IpCmError::kNone) return;
  std::array<uint8_t, kIpCmHeaderBytes> bytes{};
  if (!encode_ip_cm_header(ip, bytes)) broken("IP CM header does not fit 36 bytes");
  IpCmHeader back;
  if (decode_ip_cm_header(bytes, back) != IpCmError::kNone || !(back == ip))
    broken("IP CM header changed on a round trip");
}
}  // namespace

MadError fuzz_cm_mad_one(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);  // exact size: ASan sees overreads
  CmMessage msg;
  const MadError e = decode_cm(bytes, msg);
  if (e != MadError::kNone) return e;
  std::array<uint8_t, kMadBytes> mad{};
  encode(msg, mad);
  CmMessage back;
  if (decode_cm(mad, back) != MadError::kNone) broken("an encoded CM message does not decode");
  if (!(back == msg)) broken("a CM message changed on a round trip");
  if (const auto* req = std::get_if<CmReq>(&msg)) check_ip_cm_header(*req);
  if (const auto* sidr = std::get_if<CmSidrReq>(&msg)) check_ip_cm_header(*sidr);
  return e;
}

}  // namespace softrdma::wire::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  softrdma::wire::testing::fuzz_parse_one(data, size);
  softrdma::wire::testing::fuzz_cm_mad_one(data, size);
  return 0;
}
