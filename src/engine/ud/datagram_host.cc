// The same-host path of a UD SEND (docs/decisions/same-host.md, "UD"): when the
// destination GID is served by a softrdma process of this host, the sender places
// the message into the destination QP's next receive WQE itself (engine/
// peer_recv.h), GRH first, as that process's RNIC would on receiving the packet.
// A UD QP's queue is filled by any process at once (RecvState::kDatagram, or its
// SRQ), so a result marks itself complete and the owner completes WQEs in claim
// order. The wire's outcomes, decided here (IBA 9.8.4: UD has no RNR, nothing is
// acknowledged, so the send completes with success whatever the receiver did):
//   - no such QP, a QP that does not receive (IBA 10.3.1), a Q_Key that is not the
//     QP's (IBA 10.2.5), no receive WQE, or one too short: the message is dropped
//     and counted (host_datagrams_dropped), the WQE stays for the next message;
//   - a scatter entry the receiver's keys refuse: IBV_WC_LOC_PROT_ERR there, which
//     ends its QP (as ud/datagram.cc's receive does);
//   - this side's buffer unreadable: IBV_WC_LOC_PROT_ERR here, as the wire's gather.
// Multicast GIDs, and queues too large to publish, take the wire.
#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "engine/device.h"
#include "engine/host/peer_recv.h"
#include "engine/qp.h"
#include "engine/ud/datagram.h"
#include "samehost/host.h"
#include "wire/opcodes.h"
#include "wire/qpn_blocks.h"

namespace softrdma::engine::ud {

namespace {

// A destination's path is looked up again after this long: a process of this
// host may have started serving its GID (until then the wire reaches it). One
// that exited is seen before the next send instead (host_peer): its successor on
// the address would otherwise lose what is sent to it meanwhile (issue 27,
// finding 4: a restarted server's first REQ went unanswered, the REP dropped).
constexpr Nanos kLookUpAgain = 1'000'000'000;
// Destinations remembered per QP (the oldest is forgotten first).
constexpr size_t kPeersRemembered = 16;
// Claims lost to other senders before the message is dropped (each loss means
// another sender took the WQE: the queue moved on).
constexpr int kClaimTries = 64;

// IBA 10.3.1: a QP receives from RTR on.
bool receives(uint32_t state) {
  return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD ||
         state == IBV_QPS_SQE;
}

// What the packet's IP and UDP headers would be: the GRH the receiver gets.
void grh_for(const SendWqe& w, const transport::Gid& src, uint32_t qpn,
             uint8_t (&grh)[kGrhBytes]) {
  wire::IpUdpInfo info;
  info.src = src;
  info.dst = w.ud.dgid;
  info.src_port = transport::roce_source_port(qpn);
  const bool imm = w.opcode == IBV_WR_SEND_WITH_IMM;
  const uint8_t opcode = wire::op::kUd | (imm ? wire::op::kSendOnlyImm : wire::op::kSendOnly);
  const size_t padded = (w.length + 3) & ~size_t(3);
  write_grh(info, wire::kOpcodes[opcode].header_bytes + padded + wire::kIcrcBytes, grh);
}

}  // namespace

std::shared_ptr<samehost::Peer> Datagram::host_peer(const transport::Gid& dgid,
                                                    uint32_t remote_qpn) {
  samehost::Host* host = qp_.ctx().host;
  if (host == nullptr || dgid[0] == 0xff) return nullptr;  // multicast: the wire
  const Nanos now = qp_.ctx().clock.now();
  const uint32_t block = wire::qpn_block(remote_qpn);
  for (PeerEntry& entry : peers_) {
    if (entry.gid != dgid || entry.block != block) continue;
    const bool gone = entry.peer && !entry.peer->usable_lately();
    if (gone || now - entry.looked_up >= kLookUpAgain) {
      entry.peer = host->peer(dgid, remote_qpn);
      entry.looked_up = now;
    }
    return entry.peer;
  }
  if (peers_.size() == kPeersRemembered) peers_.erase(peers_.begin());
  peers_.push_back(PeerEntry{dgid, block, host->peer(dgid, remote_qpn), now});
  return peers_.back().peer;
}

Datagram::HostSend Datagram::send_on_host(SendWqe& w) {
  const std::shared_ptr<samehost::Peer> peer = host_peer(w.ud.dgid, w.ud.remote_qpn);
  if (!peer) return HostSend::kWire;
  peer->node->begin_access();
  const HostSend sent = place_on_host(w, *peer);
  peer->node->end_access();
  return sent;
}

Datagram::HostSend Datagram::dropped_on_host() {
  bump(qp_.ctx().counters.host_datagrams_dropped);
  return HostSend::kDone;
}

Datagram::HostSend Datagram::place_on_host(SendWqe& w, samehost::Peer& peer) {
  Device& device = qp_.device();
  EngineCounters& counters = device.counters();
  const auto grant = peer.node->qp(w.ud.remote_qpn);
  if (!grant || grant->type != IBV_QPT_UD || !receives(grant->state)) return dropped_on_host();
  if (grant->recv_queue == 0) return HostSend::kWire;  // its queue is not published
  const bool controlled = (w.ud.remote_qkey & kControlledQkeyBit) != 0;
  if ((controlled ? qp_.attr().qkey : w.ud.remote_qkey) != grant->qkey) return dropped_on_host();
  PeerRecvTarget target;
  if (!open_peer_recv(peer, *grant, w.ud.remote_qpn, target) || !target.many_senders)
    return dropped_on_host();
  const auto& gids = device.gids();
  const transport::Gid& src = gids[std::min<size_t>(w.ud.sgid_index, gids.size() - 1)];
  uint8_t grh[kGrhBytes];
  grh_for(w, src, qp_.qpn(), grh);
  std::array<iovec, kMaxLocalIovecs> local;
  local[0] = {grh, kGrhBytes};
  const uint32_t n =
      1 + gather_iovecs(w, device.mrs(), qp_.pd(), {local.data() + 1, kMaxPeerSges});
  for (uint32_t i = 1; i < n; ++i)
    if (local[i].iov_base == nullptr) return HostSend::kLocalError;  // an L_Key that fails
  samehost::RecvResult result{};
  result.byte_len = uint32_t(kGrhBytes + w.length);
  result.imm_data = w.imm_data;
  result.flags = (w.opcode == IBV_WR_SEND_WITH_IMM ? samehost::RecvResult::kWithImm : 0) |
                 (w.flags & IBV_SEND_SOLICITED ? samehost::RecvResult::kSolicited : 0) |
                 (wire::gid_is_ipv4(src) ? samehost::RecvResult::kIpv4 : 0);
  result.qpn = w.ud.remote_qpn;
  result.src_qp = qp_.qpn();
  for (int tries = 0; tries < kClaimTries; ++tries) {
    // The WQE is checked before it is claimed: one too short stays for the next
    // message, as the wire's receive leaves it.
    uint32_t index = target.rq->claimed.load(std::memory_order_acquire);
    if (int32_t(target.rq->posted.load(std::memory_order_acquire) - index) <= 0)
      return dropped_on_host();
    PeerIovecs remote;
    const PeerScatter scattered = scatter_into_peer(target, index, result.byte_len, remote, counters);
    if (scattered == PeerScatter::kTooLong || scattered == PeerScatter::kUnreadable)
      return dropped_on_host();
    if (!target.rq->claimed.compare_exchange_strong(index, index + 1, std::memory_order_acq_rel))
      continue;
    const bool refused = scattered == PeerScatter::kRefused;
    result.status = refused ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS;
    if (refused) result.byte_len = 0;
    const int err = place_into_peer(target, index, local, refused ? 0 : n, remote, result, counters);
    if (err != 0) {
      void_peer_claim(target, index, w.ud.remote_qpn);
      // This side's buffer went (munmap without ibv_dereg_mr), or the receiver's.
      return err == EFAULT && !readable_here({local.data(), n}) ? HostSend::kLocalError
                                                               : dropped_on_host();
    }
    notify_peer_recv(target, counters);
    bump(counters.host_sends);
    bump(counters.host_bytes, w.length);
    bump(qp_.counters().host_operations);
    return HostSend::kDone;
  }
  return dropped_on_host();
}

}  // namespace softrdma::engine::ud
