#include "engine/ud/datagram.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "engine/device.h"
#include "engine/qp.h"
#include "engine/sgl.h"
#include "samehost/recv_queue.h"
#include "wire/messages.h"
#include "wire/psn.h"

namespace softrdma::engine::ud {

using namespace wire;

namespace {

bool ready_to_receive(ibv_qp_state s) {
  // IBA 10.3.1: a QP receives from RTR on; RESET, INIT and ERR drop.
  return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE;
}

// The GRH of the arriving packet, rebuilt from what the socket told: addresses,
// ports, and the IPv4 ID solved from the ICRC.
void write_arrived_grh(const transport::RxPacket& from, uint8_t (&grh)[kGrhBytes]) {
  IpUdpInfo info;
  info.src = from.src;
  info.dst = from.dst;
  info.src_port = from.src_port;
  info.ipv4_id = from.ipv4_id;
  info.ipv4_df = from.ipv4_df;
  write_grh(info, from.bytes.size(), grh);
}

}  // namespace

void write_grh(const IpUdpInfo& info, size_t udp_payload_len, uint8_t (&grh)[kGrhBytes]) {
  std::memset(grh, 0, sizeof grh);
  uint8_t headers[kIpv6HeaderBytes + kUdpHeaderBytes];
  if (build_ip_udp_headers(info, udp_payload_len, headers) == 0) return;
  if (info.ipv6()) {
    std::memcpy(grh, headers, kIpv6HeaderBytes);
  } else {
    std::memcpy(grh + kGrhBytes - kIpv4HeaderBytes, headers, kIpv4HeaderBytes);
  }
}

Datagram::Datagram(Qp& qp, roce::TxBatch& tx, transport::Transport& via)
    : qp_(qp), tx_(tx), via_(via) {}

void Datagram::on_send_posted(Nanos /*now*/) {
  send(qp_.ctx().config.max_unacked_packets);
}

bool Datagram::on_tx_ready(Nanos /*now*/, uint32_t budget) { return send(budget); }

void Datagram::on_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now) {
  if (to == IBV_QPS_RTS && from == IBV_QPS_RTR) next_psn_ = qp_.attr().sq_psn;
  if (to == IBV_QPS_RTS && from != IBV_QPS_RTR) on_send_posted(now);
}

// A burst of WRs per engine turn, the rest later (Device::want_tx): nothing else
// paces a datagram sender.
bool Datagram::send(uint32_t budget) {
  Ring<SendWqe>& sq = qp_.sq();
  for (uint32_t sent = 0; sent < budget && !sq.empty(); ++sent) {
    if (qp_.state() != IBV_QPS_RTS) return false;  // IBA 11.2.5.3: SQD starts nothing
    if (!send_one(sq.front())) {
      qp_.post_event(IBV_EVENT_QP_ACCESS_ERR);
      qp_.enter_error(qp_.ctx().clock.now());
      return false;
    }
    // Complete once built: the completion becomes visible after the turn's send.
    qp_.complete_send_head(IBV_WC_SUCCESS);
  }
  const bool more = !sq.empty() && qp_.state() == IBV_QPS_RTS;
  if (more) qp_.want_tx();
  return more;
}

// One UD_SEND_ONLY (with immediate) packet. False, with the WQE's status set, when
// its local buffers cannot be read (IBA 10.8.3.1: local protection error).
bool Datagram::send_one(SendWqe& w) {
  Device& device = qp_.device();
  if (w.status != IBV_WC_SUCCESS) return false;
  switch (send_on_host(w)) {
    case HostSend::kDone:
      return true;
    case HostSend::kLocalError:
      w.status = IBV_WC_LOC_PROT_ERR;
      return false;
    case HostSend::kWire:
      break;
  }
  const auto& gids = device.gids();
  const Gid& src = gids[std::min<size_t>(w.ud.sgid_index, gids.size() - 1)];
  const bool imm = w.opcode == IBV_WR_SEND_WITH_IMM;
  PacketView p = tx_.add(via_, op::kUd | (imm ? op::kSendOnlyImm : op::kSendOnly),
                                 w.length, src, w.ud.dgid, transport::roce_source_port(qp_.qpn()));
  p.set(bth::kPkey, device.pkey());
  p.set(bth::kDestQp, w.ud.remote_qpn);
  p.set(bth::kPsn, next_psn_);
  next_psn_ = psn_add(next_psn_, 1);
  if (w.flags & IBV_SEND_SOLICITED) p.set(bth::kSolicited, 1);
  const bool controlled = (w.ud.remote_qkey & kControlledQkeyBit) != 0;
  p.set(deth::kQkey, controlled ? qp_.attr().qkey : w.ud.remote_qkey);
  p.set(deth::kSrcQp, qp_.qpn());
  if (imm) p.set(immdt::kImmediate, ntohl(w.imm_data));
  bool gathered = true;
  if (w.inline_data != nullptr) {
    std::memcpy(p.payload().data(), w.inline_data, w.length);
  } else {
    AccessError why = AccessError::kNone;
    gathered = gather(device.mrs().access(), qp_.pd(), w.sgl, 0, p.payload(), &why);
    if (why == AccessError::kUnmapped) bump(device.counters().local_access_unmapped);
  }
  if (!gathered) {
    tx_.discard_last();
    w.status = IBV_WC_LOC_PROT_ERR;
    return false;
  }
  bump(qp_.counters().tx_packets);
  return true;
}

void Datagram::on_packet(PacketView packet, const transport::RxPacket& from, Nanos now) {
  if (!ready_to_receive(qp_.state())) {
    bump(qp_.ctx().counters.rx_qp_not_ready);
    return;
  }
  if (receive(packet, from, now)) return;
  // This side's receive WQE could not be written: its error, and the QP's.
  qp_.post_event(IBV_EVENT_QP_FATAL);
  qp_.enter_error(now);
}

// False only when the receive WQE itself is bad; a packet that is not for this QP
// or finds no room is dropped and counted (IBA 10.2.5 Q_Key violation; 9.8.4: UD
// has no RNR, and Soft-RoCE drops a message too long for its buffer). A queue
// peers of this host fill too is claimed as they claim it, and its WQEs complete
// in claim order (Qp::claim_datagram_recv).
bool Datagram::receive(PacketView p, const transport::RxPacket& from, Nanos now) {
  EngineCounters& counters = qp_.ctx().counters;
  if (uint32_t(p.get(deth::kQkey)) != qp_.attr().qkey) {
    bump(counters.ud_bad_qkey);
    return true;
  }
  const std::span<const uint8_t> data = p.payload();
  const uint64_t length = kGrhBytes + data.size();
  const bool shared = qp_.host_recv() != nullptr;
  uint32_t index = 0;
  bool too_long = false;
  RecvWqe* taken = shared ? qp_.claim_datagram_recv(length, index, too_long, now)
                          : qp_.take_recv();
  if (taken == nullptr || length > taken->length) {
    bump(taken != nullptr || too_long ? counters.ud_too_long : counters.ud_no_receive_wqe);
    return true;
  }
  RecvWqe& r = *taken;
  uint8_t grh[kGrhBytes];
  write_arrived_grh(from, grh);
  const MrTable::Access access = qp_.ctx().mrs.access();
  AccessError why = AccessError::kNone;
  const bool placed = scatter(access, qp_.pd(), r.sgl, 0, grh, &why) &&
                      scatter(access, qp_.pd(), r.sgl, kGrhBytes, data, &why);
  if (why == AccessError::kUnmapped) bump(counters.peer_access_unmapped);
  ibv_wc wc{};
  wc.wr_id = r.wr_id;
  wc.status = placed ? IBV_WC_SUCCESS : IBV_WC_LOC_PROT_ERR;
  wc.opcode = IBV_WC_RECV;
  wc.byte_len = placed ? uint32_t(length) : 0;
  wc.qp_num = qp_.qpn();
  wc.src_qp = uint32_t(p.get(deth::kSrcQp));
  wc.wc_flags = IBV_WC_GRH;
  wc.sl = wire::roce_packet_type(gid_is_ipv4(from.src));
  if (p.info().has(Header::kImmDt)) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = htonl(uint32_t(p.get(immdt::kImmediate)));
  }
  const bool solicited = p.get(bth::kSolicited) != 0;
  if (!shared) return complete_own(r, wc, solicited);
  samehost::RecvResult result{};
  result.byte_len = wc.byte_len;
  result.imm_data = wc.imm_data;
  result.status = uint32_t(wc.status);
  result.flags = (wc.wc_flags & IBV_WC_WITH_IMM ? samehost::RecvResult::kWithImm : 0) |
                 (solicited ? samehost::RecvResult::kSolicited : 0) |
                 (gid_is_ipv4(from.src) ? samehost::RecvResult::kIpv4 : 0);
  result.qpn = qp_.qpn();
  result.src_qp = wc.src_qp;
  // A failed WQE ends the QP there, with the event on_packet raises.
  qp_.complete_datagram_recv(index, result, now);
  return true;
}

// This side's receive WQE could not be written: its error (on_packet ends the QP).
bool Datagram::complete_own(RecvWqe& wqe, const ibv_wc& wc, bool solicited) {
  if (wc.status != IBV_WC_SUCCESS) {
    wqe.status = wc.status;
    return false;
  }
  qp_.complete_recv_head(wc, solicited);
  return true;
}

}  // namespace softrdma::engine::ud
