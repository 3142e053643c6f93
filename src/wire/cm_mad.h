// InfiniBand Communication Manager MADs (IBA Vol 1, 12.6), as RoCEv2 peers (Linux
// Soft-RoCE, RoCE NICs under rdma_cm) send them: 256-byte MADs of management class
// 0x07, class version 2, method Send, carried as UD SEND_ONLY to QP1 (cm_gsi.h).
// Each message is a plain struct; decode() checks the common MAD header (IBA 13.4.2)
// and never reads outside the 256 bytes; encode() writes reserved bits as zero.
// Pure: no I/O, no allocation, no logging.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

#include "wire/ip_udp.h"  // Gid

namespace softrdma::wire {

inline constexpr size_t kMadBytes = 256;           // IBA 13.4.2: every MAD is 256 bytes
inline constexpr size_t kMadHeaderBytes = 24;      // IBA 13.4.2: the common MAD header
inline constexpr size_t kCmDataBytes = kMadBytes - kMadHeaderBytes;  // 232
inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;      // IBA 13.4.4 Table 145 (CM)
inline constexpr uint8_t kCmClassVersion = 2;      // what Linux's ib_cm sends and accepts
inline constexpr uint8_t kMadMethodSend = 0x03;    // IBA 13.4.5: all CM messages use Send

// IBA 12.6.3 Table 104: CM attribute IDs. LAP (0x0019) and APR (0x001A) are not
// covered (docs/decisions/cm-mads.md).
enum class CmAttr : uint16_t {
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
};
std::string_view to_string(CmAttr a);

enum class MadError : uint8_t {
  kNone,
  kBadSize,          // not exactly 256 bytes
  kBadBaseVersion,   // IBA 13.4.2: BaseVersion 1
  kBadClass,         // not the CM class (0x07)
  kBadClassVersion,  // CM class version other than 2
  kBadMethod,        // not Send (or the response bit set)
  kBadAttribute,     // not the message asked for, or not a CM message this codec knows
  kBadLength,        // an additional-information length beyond its 72-byte field
  kCount,
};
std::string_view to_string(MadError e);

// IBA 13.4.2 Figure 146: the common MAD header, as received.
struct MadHeader {
  uint8_t base_version = kMadBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  bool response = false;  // the R bit of the method byte
  uint8_t method = kMadMethodSend;  // 7 bits
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t transaction_id = 0;
  uint16_t attribute_id = 0;
  uint32_t attribute_modifier = 0;  // CM: ECE options of a REQ/REP (IBA Comment 9434), else 0
  bool operator==(const MadHeader&) const = default;
};
// Reads the header of any MAD; only the size is checked.
MadError decode_mad_header(std::span<const uint8_t> mad, MadHeader& out);
// Writes the 24 header bytes of `mad` (which holds kMadBytes).
void encode_mad_header(const MadHeader& h, std::span<uint8_t> mad);

// Path MTU / Path Packet Payload MTU (IBA 9.7.1 / 12.6.5): 1=256 .. 5=4096.
enum class CmMtu : uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };

// IBA 12.6 Table 106: the path of a REQ (primary and alternate), 44 bytes. LIDs are
// 0xFFFF on RoCE (Annex A16/A17: the permissive LID); GIDs are ::ffff:a.b.c.d for IPv4.
struct CmPath {
  uint16_t local_lid = 0;
  uint16_t remote_lid = 0;
  Gid local_gid{};
  Gid remote_gid{};
  uint32_t flow_label = 0;      // 20 bits; Soft-RoCE derives its RC UDP source port from it
  uint8_t packet_rate = 0;      // 6 bits, the PathRecord rate code (IBA 15.2.5.16; 0 current)
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;               // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;  // 5 bits: 4.096 us * 2^n
  bool operator==(const CmPath&) const = default;
};

// Every message carries the MAD's transaction ID; REQ and REP also carry the ECE
// options in the attribute modifier (0 without ECE).
struct CmReq {
  static constexpr CmAttr kAttr = CmAttr::kReq;
  static constexpr size_t kPrivateDataBytes = 92;
  uint64_t transaction_id = 0;
  uint32_t attribute_modifier = 0;
  uint32_t local_comm_id = 0;
  uint32_t vendor_id = 0;  // 24 bits, ECE (IBA Comment 9434)
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;  // 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;  // 24 bits
  uint8_t remote_cm_response_timeout = 0;  // 5 bits: 4.096 us * 2^n
  uint8_t transport_service_type = 0;      // 2 bits: 0 RC, 1 UC, 2 RD, 3 extended (XRC)
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;  // 24 bits
  uint8_t local_cm_response_timeout = 0;  // 5 bits
  uint8_t retry_count = 0;                // 3 bits
  uint16_t pkey = 0;
  CmMtu path_mtu = CmMtu::k1024;  // 4 bits
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  uint8_t max_cm_retries = 0;   // 4 bits
  bool srq = false;
  uint8_t extended_transport_type = 0;  // 3 bits: 1 XRC (with transport type 3)
  CmPath primary;
  CmPath alternate;
  bool alternate_sap_supported = false;
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmReq&) const = default;
};

// IBA 12.6 Tables 107/108: which message an MRA or REJ answers.
enum class CmMsgKind : uint8_t { kReq = 0, kRep = 1, kLapOrOther = 2 };

struct CmMra {
  static constexpr CmAttr kAttr = CmAttr::kMra;
  static constexpr size_t kPrivateDataBytes = 222;
  uint64_t transaction_id = 0;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  CmMsgKind message_mraed = CmMsgKind::kReq;  // 2 bits
  uint8_t service_timeout = 0;  // 5 bits: 4.096 us * 2^n
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmMra&) const = default;
};

// IBA 12.6 (REJ Reason): rejection reasons, as Linux's ib_cm_rej_reason numbers them.
enum class RejReason : uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupported = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerReject = 28,
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kUnsupportedClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,  // ECE (IBA Comment 9434)
};
std::string_view to_string(RejReason r);

inline constexpr size_t kCmAriBytes = 72;  // REJ ARI, SIDR_REP additional information

struct CmRej {
  static constexpr CmAttr kAttr = CmAttr::kRej;
  static constexpr size_t kPrivateDataBytes = 148;
  uint64_t transaction_id = 0;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  CmMsgKind message_rejected = CmMsgKind::kReq;  // 2 bits
  uint8_t ari_length = 0;  // 7 bits, at most kCmAriBytes (decode refuses more)
  RejReason reason = RejReason::kConsumerReject;  // any 16-bit value is kept
  std::array<uint8_t, kCmAriBytes> ari{};  // additional rejection information
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmRej&) const = default;
};

struct CmRep {
  static constexpr CmAttr kAttr = CmAttr::kRep;
  static constexpr size_t kPrivateDataBytes = 196;
  uint64_t transaction_id = 0;
  uint32_t attribute_modifier = 0;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;  // 24 bits
  uint32_t vendor_id = 0;  // 24 bits over three bytes, ECE (IBA Comment 9434)
  uint32_t local_eecn = 0;  // 24 bits
  uint32_t starting_psn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;  // 5 bits
  uint8_t failover_accepted = 0;  // 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmRep&) const = default;
};

struct CmRtu {
  static constexpr CmAttr kAttr = CmAttr::kRtu;
  static constexpr size_t kPrivateDataBytes = 224;
  uint64_t transaction_id = 0;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmRtu&) const = default;
};

struct CmDreq {
  static constexpr CmAttr kAttr = CmAttr::kDreq;
  static constexpr size_t kPrivateDataBytes = 220;
  uint64_t transaction_id = 0;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn_eecn = 0;  // 24 bits
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmDreq&) const = default;
};

struct CmDrep {
  static constexpr CmAttr kAttr = CmAttr::kDrep;
  static constexpr size_t kPrivateDataBytes = 224;
  uint64_t transaction_id = 0;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmDrep&) const = default;
};

struct CmSidrReq {
  static constexpr CmAttr kAttr = CmAttr::kSidrReq;
  static constexpr size_t kPrivateDataBytes = 216;
  uint64_t transaction_id = 0;
  uint32_t request_id = 0;
  uint16_t pkey = 0;
  uint64_t service_id = 0;
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmSidrReq&) const = default;
};

// IBA 12.11 Table 120: SIDR_REP status.
enum class SidrStatus : uint8_t {
  kSuccess = 0,
  kServiceIdNotSupported = 1,
  kRejected = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedVersion = 5,
};

struct CmSidrRep {
  static constexpr CmAttr kAttr = CmAttr::kSidrRep;
  static constexpr size_t kPrivateDataBytes = 136;
  uint64_t transaction_id = 0;
  uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kSuccess;
  uint8_t additional_info_length = 0;  // at most kCmAriBytes (decode refuses more)
  uint32_t vendor_id = 0;  // 24 bits over two fields, ECE (IBA Comment 9434)
  uint32_t qpn = 0;        // 24 bits
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, kCmAriBytes> additional_info{};  // ClassPortInfo on redirect
  std::array<uint8_t, kPrivateDataBytes> private_data{};
  bool operator==(const CmSidrRep&) const = default;
};

// Decoders: `mad` must be the whole 256-byte MAD of the message's attribute; `out` is
// written only on success.
MadError decode(std::span<const uint8_t> mad, CmReq& out);
MadError decode(std::span<const uint8_t> mad, CmMra& out);
MadError decode(std::span<const uint8_t> mad, CmRej& out);
MadError decode(std::span<const uint8_t> mad, CmRep& out);
MadError decode(std::span<const uint8_t> mad, CmRtu& out);
MadError decode(std::span<const uint8_t> mad, CmDreq& out);
MadError decode(std::span<const uint8_t> mad, CmDrep& out);
MadError decode(std::span<const uint8_t> mad, CmSidrReq& out);
MadError decode(std::span<const uint8_t> mad, CmSidrRep& out);

// Encoders: write the whole 256-byte MAD (header: base version 1, class CM, version 2,
// Send, status 0) into `mad`, which must hold kMadBytes. Values wider than their field
// are cut to its width.
void encode(const CmReq& m, std::span<uint8_t, kMadBytes> mad);
void encode(const CmMra& m, std::span<uint8_t, kMadBytes> mad);
void encode(const CmRej& m, std::span<uint8_t, kMadBytes> mad);
void encode(const CmRep& m, std::span<uint8_t, kMadBytes> mad);
void encode(const CmRtu& m, std::span<uint8_t, kMadBytes> mad);
void encode(const CmDreq& m, std::span<uint8_t, kMadBytes> mad);
void encode(const CmDrep& m, std::span<uint8_t, kMadBytes> mad);
void encode(const CmSidrReq& m, std::span<uint8_t, kMadBytes> mad);
void encode(const CmSidrRep& m, std::span<uint8_t, kMadBytes> mad);

// Any CM message, for a receiver that dispatches on the attribute ID.
using CmMessage =
    std::variant<CmReq, CmMra, CmRej, CmRep, CmRtu, CmDreq, CmDrep, CmSidrReq, CmSidrRep>;
MadError decode_cm(std::span<const uint8_t> mad, CmMessage& out);
void encode(const CmMessage& m, std::span<uint8_t, kMadBytes> mad);

}  // namespace softrdma::wire
