// Addresses, ports and routes (rdma_bind_addr(3), rdma_resolve_addr(3),
// rdma_resolve_route(3), rdma_getaddrinfo(3), rdma_create_qp(3)), within the
// process and against a listener in another process.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <rdma/rdma_verbs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "rdmacm/rdmacm_fixture.h"

namespace softrdma::rdmacm::testing {
namespace {

struct Id {
  rdma_cm_id* id = nullptr;
  explicit Id(rdma_port_space ps = RDMA_PS_TCP) { rdma_create_id(nullptr, &id, nullptr, ps); }
  ~Id() {
    if (id != nullptr) rdma_destroy_id(id);
  }
};

TEST(Bind, APortHeldIsEaddrinuseUntilReleased) {
  const uint16_t port = free_port();
  ASSERT_NE(port, 0);
  sockaddr_in loopback = ipv4("127.0.0.1", port);
  sockaddr_in any = ipv4("0.0.0.0", port);
  auto first = std::make_unique<Id>();
  ASSERT_EQ(rdma_bind_addr(first->id, as_sockaddr(loopback)), 0);
  Id second, wildcard, other_space(RDMA_PS_UDP);
  EXPECT_EQ(rdma_bind_addr(second.id, as_sockaddr(loopback)), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  EXPECT_EQ(rdma_bind_addr(wildcard.id, as_sockaddr(any)), -1);  // overlaps, as with TCP
  EXPECT_EQ(errno, EADDRINUSE);
  EXPECT_EQ(rdma_bind_addr(other_space.id, as_sockaddr(loopback)), 0);  // ports are per space
  first.reset();
  EXPECT_EQ(rdma_bind_addr(second.id, as_sockaddr(loopback)), 0);
}

TEST(Bind, PortZeroPicksAnEphemeralPort) {
  Id id;
  sockaddr_in any = ipv4("0.0.0.0", 0);
  ASSERT_EQ(rdma_bind_addr(id.id, as_sockaddr(any)), 0);
  EXPECT_GE(ntohs(rdma_get_src_port(id.id)), 32768);
  EXPECT_NE(id.id->verbs, nullptr);
  EXPECT_EQ(rdma_listen(id.id, 4), 0);
}

// A listener in another process: started, its GID read from its "ready" line.
class OtherProcess {
 public:
  OtherProcess(const char* address, uint16_t port) {
    int to_child[2], from_child[2];
    // Close-on-exec: the child keeps only its stdin and stdout, so closing ours
    // ends its wait.
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      std::string port_text = std::to_string(port);
      execl(SOFTRDMA_RDMACM_LISTENER, SOFTRDMA_RDMACM_LISTENER, address, port_text.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    stdin_ = to_child[1];
    FILE* out = fdopen(from_child[0], "r");
    char line[128] = {};
    if (out != nullptr && std::fgets(line, sizeof line, out) != nullptr) line_ = line;
    if (out != nullptr) std::fclose(out);
  }
  ~OtherProcess() {
    if (stdin_ >= 0) close(stdin_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  // The GID it printed, or "" if it did not get ready.
  std::string gid() const {
    if (line_.rfind("ready ", 0) != 0) return "";
    std::string gid = line_.substr(6);
    while (!gid.empty() && (gid.back() == '\n' || gid.back() == ' ')) gid.pop_back();
    return gid;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  std::string line_;
};

TEST(Resolve, AnotherProcessHoldingThePortIsEaddrinuse) {
  const uint16_t port = free_port();
  OtherProcess listener("127.0.0.1", port);
  ASSERT_NE(listener.gid(), "");
  Id id;
  sockaddr_in same = ipv4("127.0.0.1", port);
  EXPECT_EQ(rdma_bind_addr(id.id, as_sockaddr(same)), -1);
  EXPECT_EQ(errno, EADDRINUSE);
}

// The address a client names leads to the GID of the process listening there:
// the host's shared address (the default; both processes have it) or, with an
// address per process, the listener's, not the client's own.
TEST(Resolve, LoopbackAddressLeadsToTheListenersGid) {
  const uint16_t port = free_port();
  OtherProcess listener("127.0.0.1", port);
  ASSERT_NE(listener.gid(), "");
  Id id;
  sockaddr_in dst = ipv4("127.0.0.1", port);
  ASSERT_EQ(rdma_resolve_addr(id.id, nullptr, as_sockaddr(dst), 2000), 0);
  EXPECT_EQ(gid_text(id.id->route.addr.addr.ibaddr.dgid), listener.gid());
  ibv_gid own{};
  ASSERT_EQ(ibv_query_gid(id.id->verbs, 1, 1, &own), 0);
  EXPECT_EQ(gid_text(id.id->route.addr.addr.ibaddr.sgid), gid_text(own));  // its own, whichever
  ASSERT_EQ(rdma_resolve_route(id.id, 2000), 0);
  ASSERT_EQ(id.id->route.num_paths, 1);
  EXPECT_EQ(gid_text(id.id->route.path_rec->dgid), listener.gid());
  EXPECT_EQ(id.id->route.path_rec->pkey, htons(0xffff));
  EXPECT_GE(id.id->route.path_rec->mtu, IBV_MTU_256);
}

TEST(Resolve, WildcardListenerIsFoundThroughAnyLoopbackAddress) {
  const uint16_t port = free_port();
  OtherProcess listener("0.0.0.0", port);
  ASSERT_NE(listener.gid(), "");
  Id id;
  sockaddr_in dst = ipv4("127.0.0.1", port);
  ASSERT_EQ(rdma_resolve_addr(id.id, nullptr, as_sockaddr(dst), 2000), 0);
  EXPECT_EQ(gid_text(id.id->route.addr.addr.ibaddr.dgid), listener.gid());
}

TEST(GetAddrInfo, PassiveGivesTheSourceActiveTheDestination) {
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(res->ai_src_addr)->sin_port, htons(7471));
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  rdma_freeaddrinfo(res);
  hints = rdma_addrinfo{};
  hints.ai_port_space = RDMA_PS_UDP;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_UD);
  rdma_freeaddrinfo(res);
  EXPECT_NE(rdma_getaddrinfo("no-such-host.invalid", "1", nullptr, &res), 0);
}

// rdma_create_qp(3): a UD QP is ready to send (RTS, rdma_cm's Q_Key); an RC QP
// waits in INIT for its connection; CQs are made when none are given.
TEST(CreateQp, UdIsReadyAndRcWaitsInInit) {
  for (rdma_port_space ps : {RDMA_PS_UDP, RDMA_PS_TCP}) {
    Id id(ps);
    sockaddr_in dst = ipv4("127.0.0.1", 9);
    ASSERT_EQ(rdma_resolve_addr(id.id, nullptr, as_sockaddr(dst), 2000), 0);
    ibv_qp_init_attr attr{};
    attr.qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    ASSERT_EQ(rdma_create_qp(id.id, nullptr, &attr), 0) << errno;
    ASSERT_NE(id.id->qp, nullptr);
    EXPECT_NE(id.id->send_cq, nullptr);
    ibv_qp_attr qp_attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(id.id->qp, &qp_attr, IBV_QP_STATE | IBV_QP_QKEY, &init), 0);
    if (ps == RDMA_PS_UDP) {
      EXPECT_EQ(qp_attr.qp_state, IBV_QPS_RTS);
      EXPECT_EQ(qp_attr.qkey, RDMA_UDP_QKEY);
    } else {
      EXPECT_EQ(qp_attr.qp_state, IBV_QPS_INIT);
    }
    attr.qp_type = IBV_QPT_UC;  // not the port space's type
    EXPECT_EQ(rdma_create_qp(id.id, nullptr, &attr), -1);
    rdma_destroy_qp(id.id);
    EXPECT_EQ(id.id->qp, nullptr);
  }
}

// A forked child uses rdma_cm on its own: its agent and device are its own (the
// parent's thread is not in the child), and it finds the parent's listener.
TEST(Fork, ChildResolvesToItsParentsListener) {
  const uint16_t port = free_port();
  Id listener;
  sockaddr_in address = ipv4("127.0.0.1", port);
  ASSERT_EQ(rdma_bind_addr(listener.id, as_sockaddr(address)), 0);
  ASSERT_EQ(rdma_listen(listener.id, 4), 0);
  // What the parent resolves the address to. (A listener bound to a loopback
  // address has no device when the device serves none, as the kernel's: a
  // shared address, SOFTRDMA_SHARE_ADDRESS=1 outside ctest.)
  Id probe;
  ASSERT_EQ(rdma_resolve_addr(probe.id, nullptr, as_sockaddr(address), 2000), 0);
  const ibv_gid parent = probe.id->route.addr.addr.ibaddr.dgid;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes say what failed: 0 resolved to the parent's GID.
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP) != 0) _exit(2);
    if (rdma_resolve_addr(id, nullptr, as_sockaddr(address), 2000) != 0) _exit(3);
    const ibv_gid& dgid = id->route.addr.addr.ibaddr.dgid;
    if (std::memcmp(dgid.raw, parent.raw, 16) != 0) _exit(4);
    // Its own device, not the parent's (whose engine is not in the child).
    if (id->verbs == nullptr || id->verbs == probe.id->verbs) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// rdma_create_srq(3): the id's SRQ, which rdma_create_qp then uses.
TEST(CreateQp, SrqOfTheIdFeedsItsQp) {
  Id id;
  sockaddr_in dst = ipv4("127.0.0.1", 9);
  ASSERT_EQ(rdma_resolve_addr(id.id, nullptr, as_sockaddr(dst), 2000), 0);
  ibv_srq_init_attr srq_attr{};
  srq_attr.attr.max_wr = 8;
  srq_attr.attr.max_sge = 1;
  EXPECT_EQ(rdma_create_srq(nullptr, nullptr, &srq_attr), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(rdma_create_srq(id.id, nullptr, &srq_attr), 0) << errno;
  ASSERT_NE(id.id->srq, nullptr);
  EXPECT_EQ(rdma_create_srq(id.id, nullptr, &srq_attr), -1);  // one per id
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = 4;
  attr.cap.max_send_sge = 1;
  ASSERT_EQ(rdma_create_qp(id.id, nullptr, &attr), 0) << errno;
  EXPECT_EQ(id.id->qp->srq, id.id->srq);
  rdma_destroy_qp(id.id);
  rdma_destroy_srq(id.id);
  EXPECT_EQ(id.id->srq, nullptr);
  EXPECT_EQ(rdma_notify(id.id, IBV_EVENT_COMM_EST), 0);  // not connecting: nothing to do
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
