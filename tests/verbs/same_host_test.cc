// The same-host path through the verbs API, between processes (issue 15,
// docs/decisions/same-host.md): where cross-memory attach is refused the wire
// carries the traffic and the process says why in one line; a peer killed in the
// middle of a stream of WRITEs ends the survivor's QP in bounded time and leaves
// nothing in /dev/shm. Each child sets SOFTRDMA_TRANSPORT=auto itself: these tests
// are about the same-host path whatever the suite's variant.
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "support/seccomp_filter.h"
#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

// What a child wrote on stderr, and its exit code, once it ended.
struct ChildResult {
  int exit_code = -1;
  std::string stderr_text;
};

template <typename Body>
ChildResult run_child(Body body) {
  int err[2];
  if (pipe(err) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(err[0]);
    dup2(err[1], STDERR_FILENO);
    setenv("SOFTRDMA_TRANSPORT", "auto", 1);
    _exit(body());
  }
  close(err[1]);
  ChildResult r;
  char buffer[4096];
  for (ssize_t n; (n = read(err[0], buffer, sizeof buffer)) > 0;) r.stderr_text.append(buffer, size_t(n));
  close(err[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

// A 4 KiB WRITE from a to b of a pair inside this process; 0 when the bytes arrived.
int write_through_a_pair() {
  Pair pair;
  if (pair.a.qp == nullptr || pair.b.qp == nullptr) return 10;
  for (size_t i = 0; i < 4096; ++i) pair.a.buf[i] = uint8_t(i * 7);
  ibv_sge sge{pair.a.addr(0), 4096, pair.a.mr->lkey};
  if (post_send(pair.a.qp, IBV_WR_RDMA_WRITE, sge, 1, pair.b.addr(0), pair.b.mr->rkey) != 0)
    return 11;
  const auto wcs = poll_n(pair.a.cq, 1);
  if (wcs.size() != 1 || wcs[0].status != IBV_WC_SUCCESS) return 12;
  return std::memcmp(pair.a.buf.data(), pair.b.buf.data(), 4096) == 0 ? 0 : 13;
}

using testing_support::forbid_cross_memory_attach;

TEST(SameHost, ASeccompProfileThatForbidsItFallsBackToUdpAndSaysSoOnce) {
  const ChildResult r = run_child([] {
    if (!forbid_cross_memory_attach()) return 20;
    const int first = write_through_a_pair();
    return first != 0 ? first : write_through_a_pair();
  });
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  const std::string line = "reached by UDP: process_vm_readv is forbidden here (a seccomp profile)";
  const size_t at = r.stderr_text.find(line);
  EXPECT_NE(at, std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find(line, at + 1), std::string::npos) << "said once\n" << r.stderr_text;
}

// Without the restriction the same pair says nothing: the line above is about it.
TEST(SameHost, APermittedPairSaysNothing) {
  const ChildResult r = run_child(write_through_a_pair);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find("reached by UDP"), std::string::npos) << r.stderr_text;
}


// One end of a connection between two processes: what the other needs to know.
struct Endpoint {
  uint32_t qpn;
  ibv_gid gid;
  uint64_t addr;
  uint32_t rkey;
};

struct Ends {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  // Page-aligned, as perftest's: its pages are shared with the peer, whose
  // WRITEs into it are stores (samehost/shared_pages.h).
  std::span<uint8_t> buf = map_buffer(1 << 16);

  Ends() = default;
  Ends(const Ends&) = delete;
  Ends& operator=(const Ends&) = delete;
  ~Ends() {
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
    munmap(buf.data(), buf.size());
  }
  static std::span<uint8_t> map_buffer(size_t length) {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    return {static_cast<uint8_t*>(p), length};
  }

  bool open() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n < 1) return false;
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (ctx == nullptr || (pd = ibv_alloc_pd(ctx)) == nullptr) return false;
    if ((cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0)) == nullptr) return false;
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = ibv_qp_cap{64, 16, 1, 1, 0};
    qp = ibv_create_qp(pd, &init);
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), kAllAccess);
    return qp != nullptr && mr != nullptr;
  }
  Endpoint self() const {
    Endpoint e{qp->qp_num, {}, uint64_t(uintptr_t(buf.data())), mr->rkey};
    ibv_query_gid(ctx, 1, 1, &e.gid);
    return e;
  }
};

// This process's engine counter `name`, as `softrdma status` shows it ("  engine.NAME
// VALUE" under "process PID ..."); UINT64_MAX when absent.
uint64_t own_engine_counter(const std::string& name) {
  std::string out;
  if (FILE* p = popen(SOFTRDMA_TOOL " status 2>&1", "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof buffer, p)) out.append(buffer, n);
    pclose(p);
  }
  const size_t block = out.find("process " + std::to_string(getpid()) + " ");
  if (block == std::string::npos) return UINT64_MAX;
  const size_t next = out.find("\nprocess ", block);
  const size_t at = out.find("engine." + name + " ", block);
  if (at == std::string::npos || at > next) return UINT64_MAX;
  return std::strtoull(out.c_str() + at + name.size() + 8, nullptr, 10);
}

// Exchanges endpoints over `fd` and connects `ends` to the other side.
bool connect_over(int fd, Ends& ends, Endpoint& other) {
  const Endpoint mine = ends.self();
  if (write(fd, &mine, sizeof mine) != ssize_t(sizeof mine)) return false;
  if (read(fd, &other, sizeof other) != ssize_t(sizeof other)) return false;
  Pair::connect(ends.qp, other.qpn, other.gid, 1);
  return true;
}

std::string gid_hex(const ibv_gid& gid) {
  char text[33];
  for (int i = 0; i < 16; ++i) std::snprintf(text + 2 * i, 3, "%02x", gid.raw[i]);
  return text;
}

// A target killed while its peer WRITEs into it: the survivor's QP ends with an
// error completion, the rest flushed, in bounded time; and what the dead process
// had in /dev/shm is gone once the survivor noticed.
TEST(SameHost, APeerKilledInTheMiddleOfWritesEndsTheQpAndLeavesNothing) {
  setenv("SOFTRDMA_TRANSPORT", "auto", 1);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const pid_t target = fork();
  if (target == 0) {
    close(sv[0]);
    Ends ends;
    Endpoint other{};
    if (!ends.open() || !connect_over(sv[1], ends, other)) _exit(1);
    char ready = 'r';
    (void)!write(sv[1], &ready, 1);
    for (;;) pause();
  }
  close(sv[1]);
  Ends ends;
  ASSERT_TRUE(ends.open());
  Endpoint other{};
  ASSERT_TRUE(connect_over(sv[0], ends, other));
  char ready;
  ASSERT_EQ(read(sv[0], &ready, 1), 1);
  const std::string node = "/dev/shm/softrdma-node-" + gid_hex(other.gid);
  ASSERT_TRUE(std::filesystem::exists(node)) << node;

  ibv_sge sge{uint64_t(uintptr_t(ends.buf.data())), 4096, ends.mr->lkey};
  int posted = 0, completed = 0, errors = 0;
  ibv_wc_status first_error = IBV_WC_SUCCESS;
  auto killed_at = std::chrono::steady_clock::time_point{};
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < guard && (errors == 0 || completed < posted)) {
    if (completed == 200 && killed_at == std::chrono::steady_clock::time_point{}) {
      kill(target, SIGKILL);
      waitpid(target, nullptr, 0);
      killed_at = std::chrono::steady_clock::now();
    }
    if (errors == 0 && posted - completed < 16 &&
        post_send(ends.qp, IBV_WR_RDMA_WRITE, sge, uint64_t(posted), other.addr, other.rkey) == 0)
      ++posted;
    ibv_wc wc{};
    while (ibv_poll_cq(ends.cq, 1, &wc) == 1) {
      ++completed;
      if (wc.status != IBV_WC_SUCCESS && errors++ == 0) first_error = wc.status;
    }
  }
  ASSERT_GT(errors, 0) << "the survivor never noticed";
  EXPECT_EQ(first_error, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(completed, posted) << "every WRITE completed, the rest flushed";
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(ends.qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
  const double noticed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf("the survivor's QP ended %.1f ms after the kill\n", noticed_ms);
  // As over the wire: the request the dead peer could not take was retried
  // retry_cnt (7) times before it failed, never failed at once (it would overtake
  // the completions of requests the peer took just before it died).
  EXPECT_EQ(own_engine_counter("host_peer_not_ready"), 8u);
  EXPECT_GT(own_engine_counter("host_mapped"), 0u) << "the WRITEs went by stores";
  EXPECT_FALSE(std::filesystem::exists(node)) << "the dead peer's node segment is gone";
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/softrdma-" + std::to_string(target) + "-softrdma0"))
      << "and its status segment";
  close(sv[0]);
}

// Two sender processes, `body(fd, k)` each, each with a socket to this one.
bool fork_senders(int (*body)(int, uint32_t), int (&fds)[2], pid_t (&senders)[2]) {
  for (uint32_t k = 0; k < 2; ++k) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return false;
    senders[k] = fork();
    if (senders[k] == 0) {
      close(sv[0]);
      _exit(body(sv[1], k));
    }
    close(sv[1]);
    fds[k] = sv[0];
  }
  return true;
}

// Tells each sender it may go (it waits for the receiver's checks), and checks
// that it exited with 0.
void release_senders(int (&fds)[2], pid_t (&senders)[2]) {
  for (uint32_t k = 0; k < 2; ++k) {
    char done = 1;
    EXPECT_EQ(write(fds[k], &done, 1), 1);
    int status = 0;
    ASSERT_EQ(waitpid(senders[k], &status, 0), senders[k]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "sender " << k << ": " << status;
    close(fds[k]);
  }
}

// Two sender processes fill one SRQ at once, each through its own QP of the
// receiver (engine/srq_host_recv.cc): they claim WQEs in turn but place at their
// own pace. Every message arrives once, whole, in the WQE its completion names, on
// the QP it was sent to, and in the order its sender sent it; the receiver
// reposts each WQE as it completes, so the SRQ wraps many times.
constexpr int kSrqMessages = 3000;
constexpr uint32_t kSrqSlots = 256, kSrqSlotBytes = 64;

// A sender: `kSrqMessages` SENDs of kSrqSlotBytes, each starting with its sender
// and its number, at most 16 outstanding.
int send_numbered_messages(int fd, uint32_t sender) {
  Ends ends;
  Endpoint other{};
  if (!ends.open() || !connect_over(fd, ends, other)) return 30;
  int posted = 0, completed = 0;
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (completed < kSrqMessages && std::chrono::steady_clock::now() < guard) {
    if (posted < kSrqMessages && posted - completed < 16) {
      uint8_t* slot = ends.buf.data() + size_t(posted % 16) * kSrqSlotBytes;
      const uint32_t head[2] = {sender, uint32_t(posted)};
      std::memcpy(slot, head, sizeof head);
      std::memset(slot + sizeof head, int(0x40 + sender), kSrqSlotBytes - sizeof head);
      ibv_sge sge{uint64_t(uintptr_t(slot)), kSrqSlotBytes, ends.mr->lkey};
      if (post_send(ends.qp, IBV_WR_SEND, sge, uint64_t(posted)) != 0) return 31;
      ++posted;
    }
    ibv_wc wc{};
    while (ibv_poll_cq(ends.cq, 1, &wc) == 1) {
      if (wc.status != IBV_WC_SUCCESS) return 32;
      ++completed;
    }
  }
  char done = 0;  // the receiver checks before this process (and its QP) goes
  if (completed != kSrqMessages || read(fd, &done, 1) != 1) return 33;
  return 0;
}

TEST(SameHost, TwoSenderProcessesFillOneSrqAtOnce) {
  setenv("SOFTRDMA_TRANSPORT", "auto", 1);
  int fds[2] = {};
  pid_t senders[2] = {};
  // Before this process opens anything.
  ASSERT_TRUE(fork_senders(send_numbered_messages, fds, senders));
  Ends ends;  // its QP is unused: the two below receive from the SRQ
  ASSERT_TRUE(ends.open());
  ibv_srq_init_attr srq_init{};
  srq_init.attr = ibv_srq_attr{kSrqSlots, 1, 0};
  ibv_srq* srq = ibv_create_srq(ends.pd, &srq_init);
  ASSERT_NE(srq, nullptr);
  auto repost = [&](uint32_t slot) {
    ibv_sge sge{uint64_t(uintptr_t(ends.buf.data())) + slot * kSrqSlotBytes, kSrqSlotBytes,
                ends.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq, &wr, &bad);
  };
  for (uint32_t slot = 0; slot < kSrqSlots; ++slot) ASSERT_EQ(repost(slot), 0);
  ibv_qp* qps[2] = {};
  for (uint32_t k = 0; k < 2; ++k) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = ends.cq;
    init.srq = srq;
    init.qp_type = IBV_QPT_RC;
    init.cap = ibv_qp_cap{4, 0, 1, 0, 0};
    qps[k] = ibv_create_qp(ends.pd, &init);
    ASSERT_NE(qps[k], nullptr);
    Endpoint mine = ends.self(), other{};
    mine.qpn = qps[k]->qp_num;
    ASSERT_EQ(write(fds[k], &mine, sizeof mine), ssize_t(sizeof mine));
    ASSERT_EQ(read(fds[k], &other, sizeof other), ssize_t(sizeof other));
    Pair::connect(qps[k], other.qpn, other.gid, 1);
  }
  int next[2] = {0, 0};
  int received = 0, wrong = 0;
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (received < 2 * kSrqMessages && wrong == 0 && std::chrono::steady_clock::now() < guard) {
    ibv_wc wc{};
    if (ibv_poll_cq(ends.cq, 1, &wc) != 1) continue;
    ++received;
    const uint32_t k = wc.qp_num == qps[1]->qp_num ? 1 : 0;
    const uint8_t* slot = ends.buf.data() + wc.wr_id * kSrqSlotBytes;
    uint32_t head[2];
    std::memcpy(head, slot, sizeof head);
    const bool whole = std::all_of(slot + sizeof head, slot + kSrqSlotBytes,
                                   [&](uint8_t b) { return b == 0x40 + k; });
    if (wc.status != IBV_WC_SUCCESS || wc.byte_len != kSrqSlotBytes || wc.wr_id >= kSrqSlots ||
        wc.qp_num != qps[k]->qp_num || head[0] != k || head[1] != uint32_t(next[k]) || !whole) {
      ADD_FAILURE() << "completion " << received << ": status " << wc.status << " qp "
                    << wc.qp_num << " slot " << wc.wr_id << " sender " << head[0]
                    << " number " << head[1] << " expected " << next[k];
      ++wrong;
    }
    ++next[k];
    ASSERT_EQ(repost(uint32_t(wc.wr_id)), 0);
  }
  EXPECT_EQ(next[0], kSrqMessages);
  EXPECT_EQ(next[1], kSrqMessages);
  EXPECT_GE(own_engine_counter("host_receives"), uint64_t(2 * kSrqMessages))
      << "the senders placed them";
  release_senders(fds, senders);
  for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// Two sender processes send datagrams to one UD QP at once (engine/ud/
// datagram_host.cc): each places its messages into the receiver's WQEs itself.
// UD has no flow control of its own (a message finding no WQE is dropped), so the
// senders go in rounds the receiver grants, never more outstanding than it
// posted: every message arrives, whole, with its GRH and source QP, in the order
// its sender sent it, and neither sender counted a drop.
constexpr int kDatagrams = 3000, kRound = 50;
constexpr uint32_t kDatagramBytes = 64, kGrhBytes = 40, kUdQkey = 0x51;

ibv_qp* make_ud_qp(ibv_pd* pd, ibv_cq* cq, uint32_t recv_wrs) {
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_UD;
  init.cap = ibv_qp_cap{16, recv_wrs, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (qp == nullptr) return nullptr;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qkey = kUdQkey;
  const bool ready =
      ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0 &&
      ibv_modify_qp(qp, &(attr.qp_state = IBV_QPS_RTR, attr), IBV_QP_STATE) == 0 &&
      ibv_modify_qp(qp, &(attr.qp_state = IBV_QPS_RTS, attr), IBV_QP_STATE | IBV_QP_SQ_PSN) == 0;
  return ready ? qp : nullptr;
}

// A sender: kDatagrams of kDatagramBytes, each starting with its sender and its
// number; then what it dropped, and it waits for the receiver's word to go.
int send_numbered_datagrams(int fd, uint32_t sender) {
  Ends ends;
  Endpoint other{};
  if (!ends.open()) return 30;
  ibv_qp* qp = make_ud_qp(ends.pd, ends.cq, 1);
  if (qp == nullptr) return 31;
  Endpoint mine = ends.self();
  mine.qpn = qp->qp_num;
  if (write(fd, &mine, sizeof mine) != ssize_t(sizeof mine) ||
      read(fd, &other, sizeof other) != ssize_t(sizeof other))
    return 32;
  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.grh.dgid = other.gid;
  ah_attr.grh.sgid_index = 1;
  ah_attr.port_num = 1;
  ibv_ah* ah = ibv_create_ah(ends.pd, &ah_attr);
  if (ah == nullptr) return 33;
  for (int sent = 0, completed = 0; completed < kDatagrams;) {
    char credit = 0;  // the receiver granted the next round
    if (sent % kRound == 0 && sent != 0 && sent == completed && sent < kDatagrams &&
        read(fd, &credit, 1) != 1)
      return 37;
    if (sent < kDatagrams && sent - completed < 16 && (sent % kRound != 0 || sent == completed)) {
      uint8_t* slot = ends.buf.data() + size_t(sent % 16) * kDatagramBytes;
      const uint32_t head[2] = {sender, uint32_t(sent)};
      std::memcpy(slot, head, sizeof head);
      std::memset(slot + sizeof head, int(0x40 + sender), kDatagramBytes - sizeof head);
      ibv_sge sge{uint64_t(uintptr_t(slot)), kDatagramBytes, ends.mr->lkey};
      ibv_send_wr wr{}, *bad = nullptr;
      wr.wr_id = uint64_t(sent);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.ud = {ah, other.qpn, kUdQkey};
      if (ibv_post_send(qp, &wr, &bad) != 0) return 34;
      ++sent;
    }
    ibv_wc wc{};
    while (ibv_poll_cq(ends.cq, 1, &wc) == 1) {
      if (wc.status != IBV_WC_SUCCESS) return 35;
      ++completed;
    }
  }
  // `softrdma status` leaves out counters at 0: this process's block is there
  // when its host_sends is.
  uint64_t dropped = own_engine_counter("host_datagrams_dropped");
  if (dropped == UINT64_MAX && own_engine_counter("host_sends") != UINT64_MAX) dropped = 0;
  char done = 0;
  if (write(fd, &dropped, sizeof dropped) != ssize_t(sizeof dropped) || read(fd, &done, 1) != 1)
    return 36;
  ibv_destroy_ah(ah);
  ibv_destroy_qp(qp);
  return 0;
}

TEST(SameHost, TwoSenderProcessesFillOneUdQpAtOnce) {
  setenv("SOFTRDMA_TRANSPORT", "auto", 1);
  int fds[2] = {};
  pid_t senders[2] = {};
  // Before this process opens anything.
  ASSERT_TRUE(fork_senders(send_numbered_datagrams, fds, senders));
  Ends ends;
  ASSERT_TRUE(ends.open());
  constexpr uint32_t kSlots = 256, kSlotBytes = kGrhBytes + kDatagramBytes;
  ibv_qp* qp = make_ud_qp(ends.pd, ends.cq, kSlots);
  ASSERT_NE(qp, nullptr);
  auto repost = [&](uint32_t slot) {
    ibv_sge sge{uint64_t(uintptr_t(ends.buf.data())) + slot * kSlotBytes, kSlotBytes, ends.mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
  };
  for (uint32_t slot = 0; slot < kSlots; ++slot) ASSERT_EQ(repost(slot), 0);
  uint32_t sender_qpn[2] = {};
  Endpoint mine = ends.self();
  mine.qpn = qp->qp_num;
  for (uint32_t k = 0; k < 2; ++k) {
    Endpoint other{};
    ASSERT_EQ(read(fds[k], &other, sizeof other), ssize_t(sizeof other));
    sender_qpn[k] = other.qpn;
    ASSERT_EQ(write(fds[k], &mine, sizeof mine), ssize_t(sizeof mine));
  }
  int arrived[2] = {0, 0}, last[2] = {-1, -1}, wrong = 0;
  uint64_t dropped[2] = {UINT64_MAX, UINT64_MAX};
  auto all_in = [&] {
    for (uint32_t k = 0; k < 2; ++k)
      if (dropped[k] == UINT64_MAX || arrived[k] + dropped[k] != uint64_t(kDatagrams)) return false;
    return true;
  };
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!all_in() && wrong == 0 && std::chrono::steady_clock::now() < guard) {
    ibv_wc wc{};
    if (ibv_poll_cq(ends.cq, 1, &wc) != 1) {
      for (uint32_t k = 0; k < 2; ++k)  // a sender's count, once it finished
        if (dropped[k] == UINT64_MAX)
          recv(fds[k], &dropped[k], sizeof dropped[k], MSG_DONTWAIT);
      continue;
    }
    const uint32_t k = wc.src_qp == sender_qpn[1] ? 1 : 0;
    const uint8_t* slot = ends.buf.data() + wc.wr_id * kSlotBytes;
    uint32_t head[2];
    std::memcpy(head, slot + kGrhBytes, sizeof head);
    const bool whole = std::all_of(slot + kGrhBytes + sizeof head, slot + kSlotBytes,
                                   [&](uint8_t b) { return b == 0x40 + k; });
    const bool grh = slot[20] == 0x45 && (wc.wc_flags & IBV_WC_GRH) != 0;
    if (wc.status != IBV_WC_SUCCESS || wc.byte_len != kSlotBytes || wc.wr_id >= kSlots ||
        wc.src_qp != sender_qpn[k] || head[0] != k || int(head[1]) <= last[k] || !whole || !grh) {
      ADD_FAILURE() << "completion: status " << wc.status << " src_qp " << wc.src_qp << " slot "
                    << wc.wr_id << " sender " << head[0] << " number " << head[1] << " after "
                    << last[k];
      ++wrong;
    }
    last[k] = int(head[1]);
    ASSERT_EQ(repost(uint32_t(wc.wr_id)), 0);
    if (++arrived[k] % kRound == 0 && arrived[k] < kDatagrams) {
      const char credit = 1;
      ASSERT_EQ(write(fds[k], &credit, 1), 1);
    }
  }
  for (uint32_t k = 0; k < 2; ++k) {
    EXPECT_EQ(arrived[k], kDatagrams) << "sender " << k;
    EXPECT_EQ(dropped[k], 0u) << "sender " << k;
  }
  EXPECT_GE(own_engine_counter("host_receives"), uint64_t(arrived[0] + arrived[1]))
      << "the senders placed them";
  release_senders(fds, senders);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// Another user's process may not act for this one (the kernel's ptrace rules):
// its WRITE goes over UDP, lands all the same, and it says why once.
TEST(SameHost, AnotherUsersProcessIsReachedByUdpAndSaysSo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a peer as another user (CI runs as root)";
  setenv("SOFTRDMA_TRANSPORT", "auto", 1);
  int sv[2], err[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ASSERT_EQ(pipe(err), 0);
  const pid_t writer = fork();
  if (writer == 0) {
    close(sv[0]);
    dup2(err[1], STDERR_FILENO);
    const passwd* nobody = getpwnam("nobody");
    if (setgid(nobody != nullptr ? nobody->pw_gid : 65534) != 0 ||
        setuid(nobody != nullptr ? nobody->pw_uid : 65534) != 0)
      _exit(2);
    // The device closes (its segments go) before _exit, which runs no exit handler.
    const int code = [&] {
      Ends ends;
      Endpoint other{};
      if (!ends.open() || !connect_over(sv[1], ends, other)) return 3;
      for (size_t i = 0; i < 4096; ++i) ends.buf[i] = uint8_t(i * 13);
      ibv_sge sge{uint64_t(uintptr_t(ends.buf.data())), 4096, ends.mr->lkey};
      if (post_send(ends.qp, IBV_WR_RDMA_WRITE, sge, 1, other.addr, other.rkey) != 0) return 4;
      const auto wcs = poll_n(ends.cq, 1);
      return wcs.size() == 1 && wcs[0].status == IBV_WC_SUCCESS ? 0 : 5;
    }();
    _exit(code);
  }
  close(sv[1]);
  close(err[1]);
  Ends ends;
  ASSERT_TRUE(ends.open());
  Endpoint other{};
  ASSERT_TRUE(connect_over(sv[0], ends, other));
  std::string said;
  char buffer[4096];
  for (ssize_t n; (n = read(err[0], buffer, sizeof buffer)) > 0;) said.append(buffer, size_t(n));
  int status = 0;
  ASSERT_EQ(waitpid(writer, &status, 0), writer);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << said;
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(ends.buf[i], uint8_t(i * 13)) << i;
  EXPECT_NE(said.find("reached by UDP: its node segment belongs to another user"),
            std::string::npos)
      << said;
  close(sv[0]);
  close(err[0]);
}

}  // namespace
}  // namespace softrdma::verbs::testing
