// rdma_cm on an iWARP device (docs/decisions/iwarp-cm.md): connections over TCP
// with the MPA start-frame exchange (RFC 5044 §7.1, RFC 6581 §5), as the kernel's
// iw_cm with Linux siw runs them, then handed to the engine
// (softrdma_iwarp_attach, wire/iwarp/handoff.h).
//
// The agent's thread serves the sockets in its epoll: listeners (accept), new
// connections whose MPA request is being read, and active connects (TCP connect,
// then the MPA reply). Every call here runs under the agent's cm_mutex. A socket
// in the epoll is closed only by the agent's thread (one it holds in a batch of
// events must not be a number reused meanwhile): an application's call retires
// it (shutdown, so the peer and the port know at once) and the thread closes it
// after its batch.
#pragma once

#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "rdmacm/iwarp_mpa.h"

namespace softrdma::rdmacm {

struct CmId;

class IwarpCm {
 public:
  using Clock = std::chrono::steady_clock;

  IwarpCm(int epoll_fd, int wake_fd) : epoll_fd_(epoll_fd), wake_fd_(wake_fd) {}

  // What was refused before any id existed (RFC 5044 §7.1 violations, silence),
  // and connects that failed; each also logged when SOFTRDMA_RDMACM_LOG=1.
  struct Counters {
    uint64_t not_mpa = 0;         // a wrong key: not an MPA peer
    uint64_t bad_frame = 0;       // bad revision, revision 2 without IRD/ORD
    uint64_t too_long = 0;        // PD_Length above 256
    uint64_t markers = 0;         // markers requested (RFC 5044 §7.1: we never use them)
    uint64_t closed_early = 0;    // the peer left before its request was whole
    uint64_t timed_out = 0;       // no whole request within kRequestTimeout
    uint64_t over_backlog = 0;    // rejected: the listener's backlog was full
  };
  const Counters& counters() const { return counters_; }

  // The application's calls (iwarp_calls.cc); 0 or an errno.
  int listen(CmId& id, int backlog);
  int connect(CmId& id, const rdma_conn_param& param);
  int accept(CmId& id, const rdma_conn_param* param);
  int reject(CmId& id, const void* private_data, uint8_t length);
  int disconnect(CmId& id);
  // rdma_destroy_id: the id's sockets go, an established QP goes to Error (the
  // engine closes the stream), its passive children lose their listener.
  void forget(CmId& id);

  // The agent's thread (iwarp_cm.cc): a socket of ours is ready (false: not
  // ours); deadlines; a QP the engine moved to Error (false: not an iWARP
  // connection's).
  bool serve(int fd);
  void on_timeouts(Clock::time_point now);
  int next_timeout_ms(Clock::time_point now) const;  // -1: none
  bool qp_failed(uint32_t qpn);

 private:
  enum class Role : uint8_t { kListener, kPendingRequest, kActive, kRetired };
  struct Socket {
    Role role = Role::kRetired;
    CmId* id = nullptr;  // the listener (kListener, kPendingRequest) or the active id
    std::unique_ptr<iwarp::StartFrameReader> request;  // kPendingRequest
    Clock::time_point deadline = Clock::time_point::max();
  };

  void watch(int fd, uint32_t events, Socket socket);
  void unwatch(int fd);  // out of the epoll and the table; the caller owns fd
  void retire(int fd);   // from an application's thread
  void wake();

  void on_listener(int fd, CmId& listener);
  void on_pending_request(int fd, Socket& socket);
  void refuse(int fd, iwarp::ReadStatus why);
  void admit(int fd, CmId& listener, std::unique_ptr<iwarp::StartFrameReader> request);
  void on_active(int fd, CmId& id);
  void on_connected(int fd, CmId& id);
  void on_reply(int fd, CmId& id);
  void fail(CmId& id, int status, const iwarp::StartFrameReader* reply = nullptr);

  int epoll_fd_;
  int wake_fd_;
  std::map<int, Socket> sockets_;  // by descriptor
  std::set<CmId*> ids_;            // ids with an iWARP connection (not listeners)
  Counters counters_;
};

// Hands a connection whose start frames were exchanged to the engine
// (softrdma_iwarp_attach, SOFTRDMA_PRIVATE_1 of softrdma's libibverbs): 0 or an
// errno; the engine owns handoff.fd from the call on, also on failure (ENOSYS,
// the descriptor closed here, under a libibverbs without the call).
int iwarp_attach(ibv_qp* qp, const wire::iwarp::IwarpHandoff& handoff);

// iwarp_calls.cc: an rdma_cm event of an iWARP connection: the status, the
// peer's private data, and the depths as rdma_cm presents them.
void deliver_iwarp(CmId& id, rdma_cm_event_type type, int status,
                   const iwarp::StartFrameReader* frame, uint16_t responder_resources,
                   uint16_t initiator_depth);

}  // namespace softrdma::rdmacm
