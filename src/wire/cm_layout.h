// Where each field of the CM messages sits (IBA Vol 1, 12.6, Tables 106-113, 119,
// 120; the ECE vendor ID fields of IBA Comment 9434). Offsets are those of the
// tables: from the start of the MAD's data area (MAD byte 24). Bits are numbered as
// in fields.h: `shift` counts from the least significant bit of the field's bytes.
// Every layout is checked at compile time to tile its message exactly.
#pragma once

#include "wire/cm_mad.h"
#include "wire/mad_fields.h"

namespace softrdma::wire::mad {

// IBA 13.4.2 Figure 146: the common MAD header (offsets from MAD byte 0).
template <> struct Layout<MadHeader> {
  static constexpr size_t kBytes = kMadHeaderBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 1), &MadHeader::base_version),
      bind(be(1, 1), &MadHeader::mgmt_class),
      bind(be(2, 1), &MadHeader::class_version),
      bind(be(3, 1, 7, 1), &MadHeader::response),
      bind(be(3, 1, 0, 7), &MadHeader::method),
      bind(be(4, 2), &MadHeader::status),
      bind(be(6, 2), &MadHeader::class_specific),
      bind(be(8, 8), &MadHeader::transaction_id),
      bind(be(16, 2), &MadHeader::attribute_id),
      bind(be(20, 4), &MadHeader::attribute_modifier),
  };
  static constexpr std::array kReserved = {be(18, 2)};
};

// The 44 bytes of a REQ path but the last byte's low 3 bits, which the primary path
// reserves and the alternate path partly uses (SAP Supported).
template <> struct Layout<CmPath> {
  static constexpr size_t kBytes = 44;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 2), &CmPath::local_lid),
      bind(be(2, 2), &CmPath::remote_lid),
      bind(octets(4, 16), &CmPath::local_gid),
      bind(octets(20, 16), &CmPath::remote_gid),
      bind(be(36, 3, 4, 20), &CmPath::flow_label),
      bind(be(39, 1, 0, 6), &CmPath::packet_rate),
      bind(be(40, 1), &CmPath::traffic_class),
      bind(be(41, 1), &CmPath::hop_limit),
      bind(be(42, 1, 4, 4), &CmPath::sl),
      bind(be(42, 1, 3, 1), &CmPath::subnet_local),
      bind(be(43, 1, 3, 5), &CmPath::local_ack_timeout),
  };
  static constexpr std::array kReserved = {
      be(38, 2, 6, 6),  // between flow label and packet rate
      be(42, 1, 0, 3),
  };
};

template <> struct Layout<CmReq> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr uint8_t kPrimary = 52, kAlternate = 96;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmReq::local_comm_id),
      bind(be(5, 3), &CmReq::vendor_id),
      bind(be(8, 8), &CmReq::service_id),
      bind(be(16, 8), &CmReq::local_ca_guid),
      bind(be(28, 4), &CmReq::local_qkey),
      bind(be(32, 3), &CmReq::local_qpn),
      bind(be(35, 1), &CmReq::responder_resources),
      bind(be(36, 3), &CmReq::local_eecn),
      bind(be(39, 1), &CmReq::initiator_depth),
      bind(be(40, 3), &CmReq::remote_eecn),
      bind(be(43, 1, 3, 5), &CmReq::remote_cm_response_timeout),
      bind(be(43, 1, 1, 2), &CmReq::transport_service_type),
      bind(be(43, 1, 0, 1), &CmReq::end_to_end_flow_control),
      bind(be(44, 3), &CmReq::starting_psn),
      bind(be(47, 1, 3, 5), &CmReq::local_cm_response_timeout),
      bind(be(47, 1, 0, 3), &CmReq::retry_count),
      bind(be(48, 2), &CmReq::pkey),
      bind(be(50, 1, 4, 4), &CmReq::path_mtu),
      bind(be(50, 1, 3, 1), &CmReq::rdc_exists),
      bind(be(50, 1, 0, 3), &CmReq::rnr_retry_count),
      bind(be(51, 1, 4, 4), &CmReq::max_cm_retries),
      bind(be(51, 1, 3, 1), &CmReq::srq),
      bind(be(51, 1, 0, 3), &CmReq::extended_transport_type),
      nest(kPrimary, &CmReq::primary),
      nest(kAlternate, &CmReq::alternate),
      bind(be(kAlternate + 43, 1, 2, 1), &CmReq::alternate_sap_supported),
      bind(octets(140, CmReq::kPrivateDataBytes), &CmReq::private_data),
  };
  static constexpr std::array kReserved = {
      be(4, 1), be(24, 4),
      be(kPrimary + 43, 1, 0, 3),
      be(kAlternate + 43, 1, 0, 2),
  };
};

template <> struct Layout<CmMra> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmMra::local_comm_id),
      bind(be(4, 4), &CmMra::remote_comm_id),
      bind(be(8, 1, 6, 2), &CmMra::message_mraed),
      bind(be(9, 1, 3, 5), &CmMra::service_timeout),
      bind(octets(10, CmMra::kPrivateDataBytes), &CmMra::private_data),
  };
  static constexpr std::array kReserved = {be(8, 1, 0, 6), be(9, 1, 0, 3)};
};

template <> struct Layout<CmRej> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmRej::local_comm_id),
      bind(be(4, 4), &CmRej::remote_comm_id),
      bind(be(8, 1, 6, 2), &CmRej::message_rejected),
      bind(be(9, 1, 1, 7), &CmRej::ari_length),
      bind(be(10, 2), &CmRej::reason),
      bind(octets(12, kCmAriBytes), &CmRej::ari),
      bind(octets(84, CmRej::kPrivateDataBytes), &CmRej::private_data),
  };
  static constexpr std::array kReserved = {be(8, 1, 0, 6), be(9, 1, 0, 1)};
};

template <> struct Layout<CmRep> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmRep::local_comm_id),
      bind(be(4, 4), &CmRep::remote_comm_id),
      bind(be(8, 4), &CmRep::local_qkey),
      bind(be(12, 3), &CmRep::local_qpn),
      bind(be(15, 1), &CmRep::vendor_id, 16),
      bind(be(16, 3), &CmRep::local_eecn),
      bind(be(19, 1), &CmRep::vendor_id, 8),
      bind(be(20, 3), &CmRep::starting_psn),
      bind(be(23, 1), &CmRep::vendor_id, 0),
      bind(be(24, 1), &CmRep::responder_resources),
      bind(be(25, 1), &CmRep::initiator_depth),
      bind(be(26, 1, 3, 5), &CmRep::target_ack_delay),
      bind(be(26, 1, 1, 2), &CmRep::failover_accepted),
      bind(be(26, 1, 0, 1), &CmRep::end_to_end_flow_control),
      bind(be(27, 1, 5, 3), &CmRep::rnr_retry_count),
      bind(be(27, 1, 4, 1), &CmRep::srq),
      bind(be(28, 8), &CmRep::local_ca_guid),
      bind(octets(36, CmRep::kPrivateDataBytes), &CmRep::private_data),
  };
  static constexpr std::array kReserved = {be(27, 1, 0, 4)};
};

template <> struct Layout<CmRtu> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmRtu::local_comm_id),
      bind(be(4, 4), &CmRtu::remote_comm_id),
      bind(octets(8, CmRtu::kPrivateDataBytes), &CmRtu::private_data),
  };
  static constexpr std::array<MadField, 0> kReserved = {};
};

template <> struct Layout<CmDreq> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmDreq::local_comm_id),
      bind(be(4, 4), &CmDreq::remote_comm_id),
      bind(be(8, 3), &CmDreq::remote_qpn_eecn),
      bind(octets(12, CmDreq::kPrivateDataBytes), &CmDreq::private_data),
  };
  static constexpr std::array kReserved = {be(11, 1)};
};

template <> struct Layout<CmDrep> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmDrep::local_comm_id),
      bind(be(4, 4), &CmDrep::remote_comm_id),
      bind(octets(8, CmDrep::kPrivateDataBytes), &CmDrep::private_data),
  };
  static constexpr std::array<MadField, 0> kReserved = {};
};

template <> struct Layout<CmSidrReq> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmSidrReq::request_id),
      bind(be(4, 2), &CmSidrReq::pkey),
      bind(be(8, 8), &CmSidrReq::service_id),
      bind(octets(16, CmSidrReq::kPrivateDataBytes), &CmSidrReq::private_data),
  };
  static constexpr std::array kReserved = {be(6, 2)};
};

template <> struct Layout<CmSidrRep> {
  static constexpr size_t kBytes = kCmDataBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 4), &CmSidrRep::request_id),
      bind(be(4, 1), &CmSidrRep::status),
      bind(be(5, 1), &CmSidrRep::additional_info_length),
      bind(be(6, 2), &CmSidrRep::vendor_id, 8),
      bind(be(8, 3), &CmSidrRep::qpn),
      bind(be(11, 1), &CmSidrRep::vendor_id, 0),
      bind(be(12, 8), &CmSidrRep::service_id),
      bind(be(20, 4), &CmSidrRep::qkey),
      bind(octets(24, kCmAriBytes), &CmSidrRep::additional_info),
      bind(octets(96, CmSidrRep::kPrivateDataBytes), &CmSidrRep::private_data),
  };
  static constexpr std::array<MadField, 0> kReserved = {};
};

static_assert(layout_tiles<MadHeader>());
static_assert(layout_tiles<CmReq>());
static_assert(layout_tiles<CmMra>());
static_assert(layout_tiles<CmRej>());
static_assert(layout_tiles<CmRep>());
static_assert(layout_tiles<CmRtu>());
static_assert(layout_tiles<CmDreq>());
static_assert(layout_tiles<CmDrep>());
static_assert(layout_tiles<CmSidrReq>());
static_assert(layout_tiles<CmSidrRep>());

}  // namespace softrdma::wire::mad
