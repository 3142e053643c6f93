// The Communication Manager's connection protocol (IBA 12.6-12.9) for one
// rdma_cm id: the messages it sends, the state it is in, and its timers.
// Owned by the id, driven under the agent's lock (agent.cc) by the application's
// calls (rdma_connect, rdma_accept, ...) and by MADs and timeouts.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <cstdint>

namespace softrdma::rdmacm {

// IBA 12.7.22 (and 12.6.6 for an MRA's service timeout): 4.096 µs × 2^n.
inline std::chrono::milliseconds cm_timeout(uint8_t exponent) {
  const uint64_t ns = uint64_t(4096) << (exponent < 31 ? exponent : 31);
  return std::chrono::milliseconds(ns / 1000000 + 1);
}

// IBA 12.9.6 / Figure 134, reduced to what an rdma_cm id goes through.
enum class CmState {
  kNone,
  kReqSent,        // active: REQ sent, waiting for REP (or REJ, MRA)
  kReqReceived,    // passive: CONNECT_REQUEST delivered, the application decides
  kRepSent,        // passive: REP sent, waiting for RTU
  kRepReceived,    // active without a QP: CONNECT_RESPONSE delivered, rdma_establish sends RTU
  kEstablished,
  kDreqSent,       // waiting for DREP
  kClosed,         // disconnected, rejected or timed out
};

// What the REQ and REP settled, for the QP's transitions (IBA 12.7.2, 12.7.33).
struct Negotiated {
  uint32_t remote_qpn = 0;
  // The Starting PSN of a REQ or REP is the PSN its sender expects to receive
  // (the Linux CM: the active side sets rq_psn from its own REQ, the passive side
  // sq_psn from it; the same for the REP). So the peer's tells us where to send.
  uint32_t send_psn = 0;     // the peer's Starting PSN: our QP's sq_psn
  uint32_t receive_psn = 0;  // ours, in our REQ/REP: our QP's rq_psn
  uint8_t responder_resources = 0;  // what we serve (our max_dest_rd_atomic)
  uint8_t initiator_depth = 0;      // what we issue (our max_rd_atomic)
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t local_ack_timeout = 19;
  ibv_mtu path_mtu = IBV_MTU_1024;
  bool srq = false;
};

struct Connection {
  CmState state = CmState::kNone;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint64_t transaction_id = 0;  // the REQ's: every MAD of the connection carries it
  ibv_gid remote_gid{};
  int sgid_index = 0;
  Negotiated negotiated;
  // The last MAD sent, resent on a timeout or when the peer repeats itself.
  std::array<uint8_t, 256> last_sent{};
  bool awaiting_answer = false;  // last_sent is retransmitted until answered
  // The connection ended because its QP failed (the peer is gone or unreachable),
  // not by a DREQ: rsockets then end the stream with ECONNRESET, not EOF.
  bool lost = false;
  // The peer's process when it is one of this host (cm_peer_process.cc), or 0.
  int peer_pid = 0;
  int retries_left = 0;
  std::chrono::steady_clock::time_point deadline{};
  std::chrono::milliseconds timeout{0};
};

}  // namespace softrdma::rdmacm
