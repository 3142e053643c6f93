// The process's rdma_cm agent (docs/decisions/rdma-cm.md): the device context
// rdma_cm ids use, QP1 with the Communication Manager's connections, and one
// thread that serves what arrives without the application calling in — CM MADs,
// the CM's timeouts, and the GID requests of other processes of the host on the
// port reservations (address.h).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <sys/types.h>
#include <thread>
#include <utility>

#include "rdmacm/iwarp_cm.h"
#include "rdmacm/mad_port.h"

namespace softrdma::rdmacm {

struct CmId;
struct Incoming;

class Agent {
 public:
  // The process's agent; its thread starts on first use.
  static Agent& get();

  // The device's context (softrdma0), opened once and kept for the process's
  // life, as rdma-core's librdmacm keeps its device list; null with errno if
  // there is no device.
  ibv_context* context();
  // A PD of that context for rdma_create_qp(3) calls that give none.
  ibv_pd* default_pd();

  // Serve GID requests on a reservation's listening socket; `forget` stops and
  // closes it.
  void watch_reservation(int fd);
  void forget_reservation(int fd);

  // The Communication Manager (cm_protocol.cc). Everything below runs under
  // cm_mutex(); the calls of the application take it too (cm_calls.cc).
  std::mutex& cm_mutex() { return cm_mutex_; }
  // QP1, opened on first use; 0 or an errno.
  int open_mad_port();
  int add_listener(CmId& id);     // 0 or an errno (EADDRINUSE: another process listens)
  void add_connection(CmId& id);  // gives it a fresh local communication ID
  void forget(CmId& id);          // listener or connection, before it is freed
  // Releases the lingering services no connection needs any more.
  void settle_services();
  // The QP rdma_create_qp(3) gave an id (id.ibv.qp), known until rdma_destroy_qp(3)
  // or rdma_destroy_id(3) so that an ibv_destroy_qp(3) of it (perftest destroys
  // its control connection's QP so, the id still connected) first takes it from
  // the id: this thread moves an id's QP on a peer's DREQ or exit, and must never
  // meet a freed one. Both under cm_mutex().
  void own_qp(CmId& id);
  void disown_qp(CmId& id);
  // A passive id leaves "request received": its listener's backlog has room again.
  void request_answered(CmId& id);
  // The connection is established: if its peer is a process of this host, its
  // exit will end the connection (cm_peer_process.cc).
  void watch_peer(CmId& id);
  // Sends the id's connection's next MAD; `expect_answer` retransmits it until
  // the peer answers or the CM's retries run out.
  int send(CmId& id, std::span<const uint8_t> mad, bool expect_answer);
  // SIDR for UD ids (cm_sidr.cc): the request, and the listener's answer.
  int connect_ud(CmId& id, const rdma_conn_param& param);
  int answer_ud(CmId& id, bool accept, const rdma_conn_param* param);
  // rdma_cm on an iWARP device: TCP and MPA instead of CM MADs (iwarp_cm.h).
  IwarpCm& iwarp() { return *iwarp_; }

 private:
  Agent();
  // This process's agent if it has one (none made here), for the observer below.
  static Agent* existing();
  // softrdma_observe_qp_destroy's observer: an owned QP leaves its id.
  static void qp_destroyed(ibv_qp* qp) noexcept;
  void run();
  void serve(int fd);
  void close_retired();
  void on_mad(const ibv_gid& source, std::span<const uint8_t> mad);
  void on_req(const ibv_gid& source, const Incoming& req);
  void on_mra(CmId& id, const Incoming& mra);
  void on_rep(CmId& id, const Incoming& rep);
  void on_rej(CmId& id, const Incoming& rej);
  void on_dreq(CmId& id, const Incoming& dreq);
  void on_sidr_req(const ibv_gid& source, const Incoming& req);
  CmId* admit(CmId& listening, const ibv_gid& source, const Incoming& req);
  void on_sidr_rep(CmId& id, const Incoming& rep);
  void on_timeouts();
  int next_timeout_ms();
  // A peer that dies (cm_peer_loss.cc): QPs of established connections that
  // entered Error end those connections.
  void watch_qp_errors();
  void on_qp_errors();
  void connection_lost(CmId& id);
  // On one host (cm_peer_process.cc): the process holding a peer's GID, watched
  // through a pidfd from ESTABLISHED on; its exit ends its connections at once.
  void publish_liveness();
  bool serve_liveness_socket(int fd);
  bool serve_pidfd(int fd);
  void on_peer_exit(int pidfd);
  void unwatch_peer(pid_t pid);

  std::mutex mutex_;
  ibv_context* context_ = nullptr;  // guarded by mutex_
  ibv_pd* default_pd_ = nullptr;    // guarded by mutex_
  std::set<int> reservations_;      // guarded by mutex_
  // Numbers of reservations forgotten since the thread's batch of events began:
  // their sockets are closed, but each number names the placeholder (/dev/null)
  // until the batch is served, so that an event of the batch for it never reaches
  // a file opened under that number meanwhile (forget_reservation).
  std::set<int> retired_;           // guarded by mutex_
  int placeholder_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: a new deadline, recompute the wait
  // softrdma_qp_error_fd of context_: readable when a QP entered Error.
  std::atomic<int> qp_error_fd_{-1};
  std::thread thread_;
  std::unique_ptr<IwarpCm> iwarp_;  // its sockets are in epoll_fd_; guarded by cm_mutex_

  std::mutex cm_mutex_;
  std::unique_ptr<MadPort> mad_port_;               // guarded by cm_mutex_
  std::map<uint64_t, CmId*> listeners_;             // by service ID; guarded by cm_mutex_
  // Services whose listener is gone while a connection it took may still see its
  // REQ repeated (cm_protocol.cc, settle_services); guarded by cm_mutex_.
  std::set<uint64_t> lingering_services_;
  std::map<uint32_t, CmId*> connections_;           // by local comm ID; guarded by cm_mutex_
  // (peer GID, its comm ID) -> id: a repeated REQ finds its connection.
  std::map<std::pair<ibv_gid, uint32_t>, CmId*, GidKeyLess> by_remote_;
  uint32_t next_comm_id_ = 0;
  // The slot this process's Communication IDs carry on a shared address; 0: none.
  uint32_t comm_id_slot_ = 0;  // guarded by cm_mutex_
  // QP -> the id that owns it (own_qp). Written under cm_mutex_ and qps_mutex_,
  // a leaf lock: qp_destroyed looks first without cm_mutex_, as QP1, no id's, is
  // destroyed under it.
  std::mutex qps_mutex_;
  std::map<const ibv_qp*, CmId*> qp_owners_;
  // Liveness on one host (cm_peer_process.cc): the abstract sockets named after
  // this process's GIDs (guarded by mutex_), and a pidfd per peer process
  // (guarded by cm_mutex_).
  std::set<int> liveness_fds_;
  std::map<pid_t, int> peer_pidfds_;
  std::map<int, pid_t> pidfd_peers_;
};

}  // namespace softrdma::rdmacm
