// The process's rdma_cm agent (docs/decisions/rdma-cm.md): the device context
// rdma_cm ids use, and one thread that serves what arrives without the
// application calling in — today the GID requests of other processes of the
// host on the port reservations (address.h); the Communication Manager's MADs
// on QP1 and its timers join it.
#pragma once

#include <infiniband/verbs.h>

#include <mutex>
#include <set>
#include <thread>

namespace softrdma::rdmacm {

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

 private:
  Agent();
  void run();
  void serve(int fd);

  std::mutex mutex_;
  ibv_context* context_ = nullptr;  // guarded by mutex_
  ibv_pd* default_pd_ = nullptr;    // guarded by mutex_
  std::set<int> reservations_;      // guarded by mutex_
  int epoll_fd_ = -1;
  std::thread thread_;
};

}  // namespace softrdma::rdmacm
