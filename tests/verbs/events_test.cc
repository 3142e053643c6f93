// Completion channels (ibv_req_notify_cq(3), ibv_get_cq_event(3)), async events
// (ibv_get_async_event(3)) and fork (ibv_fork_init(3)).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

// Waits until fd is readable (a liveness guard, not a timing assertion).
bool readable(int fd, int timeout_ms = 30000) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

bool readable_now(int fd) { return readable(fd, 0); }

void set_nonblocking(int fd) { ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0); }

// An armed CQ makes its channel's fd readable at the next completion, once;
// ibv_get_cq_event hands out the CQ and its context.
TEST(CompletionChannel, NotifiesOnceAfterArming) {
  Pair pair(PairOptions{.with_channel = true});
  Side& b = pair.b;
  set_nonblocking(b.channel->fd);
  ASSERT_EQ(ibv_req_notify_cq(b.cq, 0), 0);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(post_recv(b.qp, {b.addr(i * 64), 64, b.mr->lkey}, i), 0);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_SEND, {pair.a.addr(0), 8, pair.a.mr->lkey}, 1), 0);
  ASSERT_TRUE(readable(b.channel->fd));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_EQ(ibv_get_cq_event(b.channel, &cq, &cq_context), 0);
  EXPECT_EQ(cq, b.cq);
  EXPECT_EQ(cq_context, &b);
  EXPECT_EQ(poll_n(b.cq, 1).size(), 1u);
  // Not re-armed: a second completion raises no event.
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_SEND, {pair.a.addr(0), 8, pair.a.mr->lkey}, 2), 0);
  EXPECT_EQ(poll_n(b.cq, 1).size(), 1u);
  EXPECT_FALSE(readable_now(b.channel->fd));
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(b.channel, &cq, &cq_context), -1);
  EXPECT_EQ(errno, EAGAIN);  // the application made the fd non-blocking
  ibv_ack_cq_events(b.cq, 1);
}

// Solicited-only arming fires on a completion carrying the Solicited Event bit
// (IBA 9.2.1), not on an ordinary one.
TEST(CompletionChannel, SolicitedOnly) {
  Pair pair(PairOptions{.with_channel = true});
  Side& b = pair.b;
  ASSERT_EQ(ibv_req_notify_cq(b.cq, 1), 0);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(post_recv(b.qp, {b.addr(i * 64), 64, b.mr->lkey}, i), 0);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_SEND, {pair.a.addr(0), 8, pair.a.mr->lkey}, 1), 0);
  ASSERT_EQ(poll_n(b.cq, 1).size(), 1u);
  EXPECT_FALSE(readable_now(b.channel->fd));
  ibv_sge sge{pair.a.addr(0), 8, pair.a.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(pair.a.qp, &wr, &bad), 0);
  ASSERT_TRUE(readable(b.channel->fd));
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(b.channel, &cq, &ctx), 0);
  EXPECT_EQ(cq, b.cq);
  ibv_ack_cq_events(cq, 1);
}

// A CQ too small for its completions overruns: IBV_EVENT_CQ_ERR on the
// context's async fd (IBA 11.4.2.1), naming the CQ.
TEST(AsyncEvents, CqOverrunRaisesCqError) {
  Pair pair(PairOptions{.cqe = 2});
  Side& a = pair.a;
  set_nonblocking(a.ctx->async_fd);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, {a.addr(0), 8, a.mr->lkey}, i, pair.b.addr(0),
                        pair.b.mr->rkey),
              0);
  }
  ASSERT_TRUE(readable(a.ctx->async_fd));
  ibv_async_event event{};
  ASSERT_EQ(ibv_get_async_event(a.ctx, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(event.element.cq, a.cq);
  ibv_ack_async_event(&event);
  errno = 0;
  EXPECT_EQ(ibv_get_async_event(a.ctx, &event), -1);  // only one event per overrun
  EXPECT_EQ(errno, EAGAIN);
}

// A bad rkey puts the responder's QP in error with IBV_EVENT_QP_ACCESS_ERR
// (IBA 11.6.3.1), delivered to that QP's context, element.qp naming it.
TEST(AsyncEvents, RemoteAccessErrorRaisesQpAccessError) {
  Pair pair(PairOptions{.two_contexts = true});
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, {pair.a.addr(0), 8, pair.a.mr->lkey}, 1,
                      pair.b.addr(0), pair.b.mr->rkey + 1),
            0);
  ASSERT_TRUE(readable(pair.b.ctx->async_fd));
  ibv_async_event event{};
  ASSERT_EQ(ibv_get_async_event(pair.b.ctx, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(event.element.qp, pair.b.qp);
  EXPECT_FALSE(readable_now(pair.a.ctx->async_fd));  // not the other context's
  ibv_ack_async_event(&event);  // ibv_destroy_qp would wait for it
}

// Whether this process holds a socket bound to UDP port 4791 (RoCEv2's) or a
// hand-over socket (transport/udp/handover.h): what a child of fork() must not
// keep of its parent's device (host-rnic.md, "Fork").
bool holds_a_device_socket() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return false;
  bool found = false;
  for (dirent* entry; !found && (entry = readdir(dir)) != nullptr;) {
    const int fd = std::atoi(entry->d_name);
    if (entry->d_name[0] == '.' || fd == dirfd(dir)) continue;
    sockaddr_storage name{};
    socklen_t length = sizeof name;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&name), &length) != 0) continue;
    if (name.ss_family == AF_INET)
      found = ntohs(reinterpret_cast<sockaddr_in*>(&name)->sin_port) == 4791;
    else if (name.ss_family == AF_INET6)
      found = ntohs(reinterpret_cast<sockaddr_in6*>(&name)->sin6_port) == 4791;
    else if (name.ss_family == AF_UNIX && length > offsetof(sockaddr_un, sun_path) + 1)
      found = std::strncmp(reinterpret_cast<sockaddr_un*>(&name)->sun_path + 1,
                           "softrdma-handover/", 18) == 0;
  }
  closedir(dir);
  return found;
}

// After fork() the child may not use the parent's objects (they fail, without
// touching the parent's engine) but may open the device anew: on the parent's
// shared address (the default) its QPs take a block of QPNs of their own, with
// SOFTRDMA_SHARE_ADDRESS=0 it has an address of its own; the parent goes on
// undisturbed. What needs no engine works on the
// parent's context, as on a kernel's: its attributes, device memory (host memory).
TEST(Fork, ChildOpensItsOwnDeviceAndParentGoesOn) {
  Pair pair;
  ASSERT_TRUE(holds_a_device_socket()) << "the check would not see one";
  ibv_gid parent_gid{};
  ASSERT_EQ(ibv_query_gid(pair.a.ctx, 1, 1, &parent_gid), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    if (holds_a_device_socket()) code |= 32;  // the parent's place on its address
    if (ibv_alloc_pd(pair.a.ctx) != nullptr || errno != EIO) code |= 1;
    ibv_device_attr attr{};
    if (ibv_query_device(pair.a.ctx, &attr) != 0 || attr.phys_port_cnt != 1) code |= 8;
    ibv_alloc_dm_attr dm_attr{};
    dm_attr.length = 4096;
    ibv_dm* dm = ibv_alloc_dm(pair.a.ctx, &dm_attr);
    if (dm == nullptr || ibv_free_dm(dm) != 0) code |= 16;
    Device dev;
    ibv_gid child_gid{};
    if (dev.ctx() == nullptr || ibv_query_gid(dev.ctx(), 1, 1, &child_gid) != 0) code |= 2;
    ibv_pd* pd = dev.ctx() != nullptr ? ibv_alloc_pd(dev.ctx()) : nullptr;
    ibv_cq* cq = dev.ctx() != nullptr ? ibv_create_cq(dev.ctx(), 4, nullptr, nullptr, 0) : nullptr;
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {1, 1, 1, 1, 0};
    ibv_qp* qp = pd != nullptr && cq != nullptr ? ibv_create_qp(pd, &init) : nullptr;
    // One address, two processes: told apart by their QPNs' blocks (host-rnic.md).
    const bool same_address = std::memcmp(child_gid.raw, parent_gid.raw, 16) == 0;
    if (qp == nullptr || (same_address && qp->qp_num >> 14 == pair.a.qp->qp_num >> 14)) code |= 4;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_EQ(post_recv(pair.b.qp, {pair.b.addr(0), 8, pair.b.mr->lkey}, 1), 0);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_SEND, {pair.a.addr(0), 8, pair.a.mr->lkey}, 2), 0);
  auto wc = poll_n(pair.b.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace softrdma::verbs::testing
