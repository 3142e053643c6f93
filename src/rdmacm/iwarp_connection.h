// An rdma_cm id's iWARP connection (docs/decisions/iwarp-cm.md): where it is in
// the TCP and MPA start-frame exchange (RFC 5044 §7.1, RFC 6581 §5), its socket
// until the engine takes it, and what the two sides settled. Owned by the id,
// under the agent's cm_mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "rdmacm/iwarp_mpa.h"

namespace softrdma::rdmacm {

enum class IwarpPhase : uint8_t {
  kNone,
  kListening,        // a listening TCP socket, in the agent's epoll
  kConnecting,       // active: TCP connect under way
  kAwaitingReply,    // active: MPA request sent, reading the reply
  kRequestReceived,  // passive: CONNECT_REQUEST delivered, the application decides
  kEstablished,      // the engine owns the socket
  kClosed,           // rejected, refused, failed, disconnected
};
const char* to_string(IwarpPhase phase);

struct IwarpConnection {
  IwarpPhase phase = IwarpPhase::kNone;
  // The listening socket, or the connection's until softrdma_iwarp_attach.
  int fd = -1;
  // The peer's start frame (the request on the passive side, the reply on the
  // active one); its private data stays here while the application decides.
  iwarp::StartFrameReader peer_frame;
  // Active: what the request asks, and the request itself, sent once TCP is up.
  iwarp::Offer offer;
  std::array<uint8_t, iwarp::kMaxFrameBytes> request{};
  size_t request_bytes = 0;
  iwarp::Agreement agreed;
  // The stream ended under an established connection other than by the peer's
  // orderly close (a reset, a socket error, a Terminate: the engine's QP failed).
  bool lost = false;
};

}  // namespace softrdma::rdmacm
