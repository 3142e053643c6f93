// Several sender processes filling one receive queue of this process at once
// on the same-host path (issue 15, docs/decisions/same-host.md "SRQs", "UD").
// Each child sets SOFTRDMA_TRANSPORT=auto itself.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "verbs/same_host_support.h"

namespace softrdma::verbs::testing {
namespace {

// Two sender processes fill one SRQ at once, each through its own QP of the
// receiver (engine/host/srq_recv.cc): they claim WQEs in turn but place at their
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
}  // namespace
}  // namespace softrdma::verbs::testing
