#include "wire/cm_mad.h"

#include "wire/cm_layout.h"

namespace softrdma::wire {

std::string_view to_string(CmAttr a) {
  switch (a) {
    case CmAttr::kReq: return "REQ";
    case CmAttr::kMra: return "MRA";
    case CmAttr::kRej: return "REJ";
    case CmAttr::kRep: return "REP";
    case CmAttr::kRtu: return "RTU";
    case CmAttr::kDreq: return "DREQ";
    case CmAttr::kDrep: return "DREP";
    case CmAttr::kSidrReq: return "SIDR_REQ";
    case CmAttr::kSidrRep: return "SIDR_REP";
  }
  return "?";
}

std::string_view to_string(MadError e) {
  switch (e) {
    case MadError::kNone: return "none";
    case MadError::kBadSize: return "bad_size";
    case MadError::kBadBaseVersion: return "bad_base_version";
    case MadError::kBadClass: return "bad_class";
    case MadError::kBadClassVersion: return "bad_class_version";
    case MadError::kBadMethod: return "bad_method";
    case MadError::kBadAttribute: return "bad_attribute";
    case MadError::kBadLength: return "bad_length";
    case MadError::kCount: break;
  }
  return "?";
}

std::string_view to_string(RejReason r) {
  switch (r) {
    case RejReason::kNoQp: return "no QP";
    case RejReason::kNoEec: return "no EEC";
    case RejReason::kNoResources: return "no resources";
    case RejReason::kTimeout: return "timeout";
    case RejReason::kUnsupported: return "unsupported request";
    case RejReason::kInvalidCommId: return "invalid communication ID";
    case RejReason::kInvalidCommInstance: return "invalid communication instance";
    case RejReason::kInvalidServiceId: return "invalid service ID";
    case RejReason::kInvalidTransportType: return "invalid transport service type";
    case RejReason::kStaleConnection: return "stale connection";
    case RejReason::kRdcNotExist: return "RDC does not exist";
    case RejReason::kInvalidGid: return "primary remote port GID rejected";
    case RejReason::kInvalidLid: return "primary remote port LID rejected";
    case RejReason::kInvalidSl: return "invalid primary SL";
    case RejReason::kInvalidTrafficClass: return "invalid primary traffic class";
    case RejReason::kInvalidHopLimit: return "invalid primary hop limit";
    case RejReason::kInvalidPacketRate: return "invalid primary packet rate";
    case RejReason::kInvalidAltGid: return "alternate remote port GID rejected";
    case RejReason::kInvalidAltLid: return "alternate remote port LID rejected";
    case RejReason::kInvalidAltSl: return "invalid alternate SL";
    case RejReason::kInvalidAltTrafficClass: return "invalid alternate traffic class";
    case RejReason::kInvalidAltHopLimit: return "invalid alternate hop limit";
    case RejReason::kInvalidAltPacketRate: return "invalid alternate packet rate";
    case RejReason::kPortCmRedirect: return "port and CM redirection";
    case RejReason::kPortRedirect: return "port redirection";
    case RejReason::kInvalidMtu: return "invalid path MTU";
    case RejReason::kInsufficientRespResources: return "insufficient responder resources";
    case RejReason::kConsumerReject: return "consumer reject";
    case RejReason::kInvalidRnrRetry: return "invalid RNR NAK retry count";
    case RejReason::kDuplicateLocalCommId: return "duplicate local communication ID";
    case RejReason::kUnsupportedClassVersion: return "unsupported class version";
    case RejReason::kInvalidFlowLabel: return "invalid primary flow label";
    case RejReason::kInvalidAltFlowLabel: return "invalid alternate flow label";
    case RejReason::kVendorOptionNotSupported: return "vendor option not supported";
  }
  return "unknown reason";
}

MadError decode_mad_header(std::span<const uint8_t> mad, MadHeader& out) {
  if (mad.size() != kMadBytes) return MadError::kBadSize;
  out = mad::load_fields<MadHeader>(mad.first(kMadHeaderBytes));
  return MadError::kNone;
}

void encode_mad_header(const MadHeader& h, std::span<uint8_t> mad) {
  mad::store_fields(h, mad.first(kMadHeaderBytes));
}

namespace {

// The header checks every CM message shares (IBA 13.4.2, 12.6.1); `h` is set on success.
MadError check_cm_header(std::span<const uint8_t> mad, MadHeader& h) {
  if (MadError e = decode_mad_header(mad, h); e != MadError::kNone) return e;
  if (h.base_version != kMadBaseVersion) return MadError::kBadBaseVersion;
  if (h.mgmt_class != kMgmtClassCm) return MadError::kBadClass;
  if (h.class_version != kCmClassVersion) return MadError::kBadClassVersion;
  if (h.response || h.method != kMadMethodSend) return MadError::kBadMethod;
  return MadError::kNone;
}

template <class Msg>
constexpr bool kHasAttributeModifier = requires(Msg m) { m.attribute_modifier; };

// Lengths that say how much of a fixed 72-byte field is meaningful (IBA 12.6 Table
// 108 ARI length, Table 120 additional information length) cannot exceed it.
template <class Msg> MadError check_lengths(const Msg&) { return MadError::kNone; }
MadError check_lengths(const CmRej& m) {
  return m.ari_length > kCmAriBytes ? MadError::kBadLength : MadError::kNone;
}
MadError check_lengths(const CmSidrRep& m) {
  return m.additional_info_length > kCmAriBytes ? MadError::kBadLength : MadError::kNone;
}

template <class Msg>
MadError decode_message(std::span<const uint8_t> mad, Msg& out) {
  MadHeader h;
  if (MadError e = check_cm_header(mad, h); e != MadError::kNone) return e;
  if (h.attribute_id != uint16_t(Msg::kAttr)) return MadError::kBadAttribute;
  Msg m = mad::load_fields<Msg>(mad.subspan(kMadHeaderBytes));
  if (MadError e = check_lengths(m); e != MadError::kNone) return e;
  m.transaction_id = h.transaction_id;
  if constexpr (kHasAttributeModifier<Msg>) m.attribute_modifier = h.attribute_modifier;
  out = m;
  return MadError::kNone;
}

template <class Msg>
void encode_message(const Msg& m, std::span<uint8_t, kMadBytes> mad) {
  MadHeader h;
  h.transaction_id = m.transaction_id;
  h.attribute_id = uint16_t(Msg::kAttr);
  if constexpr (kHasAttributeModifier<Msg>) h.attribute_modifier = m.attribute_modifier;
  encode_mad_header(h, mad);
  mad::store_fields(m, std::span<uint8_t>(mad).subspan(kMadHeaderBytes));
}

}  // namespace

MadError decode(std::span<const uint8_t> mad, CmReq& out) { return decode_message(mad, out); }
MadError decode(std::span<const uint8_t> mad, CmMra& out) { return decode_message(mad, out); }
MadError decode(std::span<const uint8_t> mad, CmRej& out) { return decode_message(mad, out); }
MadError decode(std::span<const uint8_t> mad, CmRep& out) { return decode_message(mad, out); }
MadError decode(std::span<const uint8_t> mad, CmRtu& out) { return decode_message(mad, out); }
MadError decode(std::span<const uint8_t> mad, CmDreq& out) { return decode_message(mad, out); }
MadError decode(std::span<const uint8_t> mad, CmDrep& out) { return decode_message(mad, out); }
MadError decode(std::span<const uint8_t> mad, CmSidrReq& out) {
  return decode_message(mad, out);
}
MadError decode(std::span<const uint8_t> mad, CmSidrRep& out) {
  return decode_message(mad, out);
}

void encode(const CmReq& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }
void encode(const CmMra& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }
void encode(const CmRej& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }
void encode(const CmRep& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }
void encode(const CmRtu& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }
void encode(const CmDreq& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }
void encode(const CmDrep& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }
void encode(const CmSidrReq& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }
void encode(const CmSidrRep& m, std::span<uint8_t, kMadBytes> mad) { encode_message(m, mad); }

namespace {
template <class Msg>
MadError decode_into(std::span<const uint8_t> mad, CmMessage& out) {
  Msg m;
  const MadError e = decode_message(mad, m);
  if (e == MadError::kNone) out = m;
  return e;
}
}  // namespace

MadError decode_cm(std::span<const uint8_t> mad, CmMessage& out) {
  MadHeader h;
  if (MadError e = check_cm_header(mad, h); e != MadError::kNone) return e;
  switch (CmAttr(h.attribute_id)) {
    case CmAttr::kReq: return decode_into<CmReq>(mad, out);
    case CmAttr::kMra: return decode_into<CmMra>(mad, out);
    case CmAttr::kRej: return decode_into<CmRej>(mad, out);
    case CmAttr::kRep: return decode_into<CmRep>(mad, out);
    case CmAttr::kRtu: return decode_into<CmRtu>(mad, out);
    case CmAttr::kDreq: return decode_into<CmDreq>(mad, out);
    case CmAttr::kDrep: return decode_into<CmDrep>(mad, out);
    case CmAttr::kSidrReq: return decode_into<CmSidrReq>(mad, out);
    case CmAttr::kSidrRep: return decode_into<CmSidrRep>(mad, out);
  }
  return MadError::kBadAttribute;  // ClassPortInfo, LAP, APR, or no CM attribute
}

void encode(const CmMessage& m, std::span<uint8_t, kMadBytes> mad) {
  std::visit([&](const auto& msg) { encode_message(msg, mad); }, m);
}

}  // namespace softrdma::wire
