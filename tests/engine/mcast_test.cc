// UD multicast (IBA 10.5, 11.3.1-2; docs/decisions/multicast.md) on the fake
// network: a send to a group's GID with DestQP 0xFFFFFF reaches every QP attached
// to the group, on every device that has one, each QP checking its own Q_Key and
// taking its own receive WQE; the GRH names the group as destination.
#include <arpa/inet.h>

#include <cstring>

#include "engine/rc_fixture.h"
#include "engine/ud/datagram.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

constexpr size_t kSrc = 0;
constexpr size_t kDst = 64 * 1024;
constexpr size_t kDst2 = 128 * 1024;
constexpr uint32_t kGrh = ud::kGrhBytes;
constexpr uint32_t kMulticastQpn = 0xffffff;

class McastTest : public RcPairTest {
 protected:
  void SetUp() override {
    RcOptions options;
    options.type = IBV_QPT_UD;
    connect(options);
    group_ = transport::fake::ipv4_gid(239, 1, 2, 3);
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.port_num = 1;
    attr.grh.sgid_index = 1;
    std::memcpy(attr.grh.dgid.raw, group_.data(), 16);
    int err = 0;
    group_ah_ = a.device->create_ah(a.pd, attr, err);
    ASSERT_NE(group_ah_, nullptr) << err;
  }

  // Another UD QP on `n`'s device, with its own receive CQ, at RTS with `qkey`.
  Qp* extra_qp(Node& n, Cq*& rcq, uint32_t qkey, bool block_self_loopback = false) {
    int err = 0;
    rcq = n.device->create_cq(64, err);
    QpInit init;
    init.type = IBV_QPT_UD;
    init.send_cq = n.scq;
    init.recv_cq = rcq;
    init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
    init.block_self_multicast_loopback = block_self_loopback;
    Qp* qp = n.device->create_qp(n.pd, init, err);
    EXPECT_NE(qp, nullptr) << err;
    RcOptions options = options_;
    options.qkey = qkey;
    if (qp != nullptr) connect_qp(*qp, *n.device, 0, 0, 0, 0, options);
    return qp;
  }

  void post_recv_on(Node& n, Qp* qp, size_t offset, uint64_t wr_id) {
    ibv_sge sge{n.addr(offset), kGrh + 1024, n.mr->key};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(qp->post_recv(&wr, &bad), 0);
  }

  // A SEND of `length` bytes from a's QP to the group (DestQP 0xFFFFFF).
  int send_to_group(uint32_t length, uint64_t wr_id, uint32_t qkey) {
    return post_with(a, IBV_WR_SEND, kSrc, length, 0, wr_id, [&](ibv_send_wr& wr, ibv_sge&) {
      wr.wr.ud.ah = &group_ah_->ibv;
      wr.wr.ud.remote_qpn = kMulticastQpn;
      wr.wr.ud.remote_qkey = qkey;
    });
  }

  // A UD SEND_ONLY to the group with 16 bytes of payload, from `source_qpn`
  // (injected past the sending device: the fake network adds the addresses).
  std::vector<uint8_t> group_send(uint32_t source_qpn) const {
    std::vector<uint8_t> bytes(wire::kBthBytes + 8 + 16 + wire::kIcrcBytes);
    wire::PacketView p;
    bytes[0] = wire::op::kUd | wire::op::kSendOnly;
    EXPECT_EQ(wire::parse_packet(bytes, p), wire::ParseError::kNone);
    p.set(wire::bth::kPkey, 0xffff);
    p.set(wire::bth::kDestQp, kMulticastQpn);
    p.set(wire::deth::kQkey, options_.qkey);
    p.set(wire::deth::kSrcQp, source_qpn);
    return bytes;
  }

  // The GRH at `offset` of `n`'s memory names the group as destination (IPv4
  // header in its last 20 bytes, destination address at byte 16 of it).
  bool grh_names_group(const Node& n, size_t offset) const {
    return std::memcmp(n.mem.data() + offset + 20 + 16, group_.data() + 12, 4) == 0;
  }

  Gid group_{};
  Ah* group_ah_ = nullptr;
};

TEST_F(McastTest, TwoQpsOfOneDeviceEachGetTheirOwnCopy) {
  Cq* rcq2 = nullptr;
  Qp* b2 = extra_qp(b, rcq2, options_.qkey);
  ASSERT_NE(b2, nullptr);
  ASSERT_EQ(b.device->attach_mcast(b.qp, group_), 0);
  ASSERT_EQ(b.device->attach_mcast(b2, group_), 0);
  post_recv(b, kDst, kGrh + 1024, 7);
  post_recv_on(b, b2, kDst2, 8);
  fill(a, kSrc, 300, 3);
  ASSERT_EQ(send_to_group(300, 1, options_.qkey), 0);
  const auto sent = net_.take_sent();
  ASSERT_EQ(sent.size(), 1u) << "one packet on the wire, copied by the receiver";
  EXPECT_EQ(sent[0].dest_qp(), kMulticastQpn);
  EXPECT_EQ(sent[0].dst, group_);
  pump();
  for (auto [cq, wr_id, offset] : {std::tuple{b.rcq, 7u, kDst}, std::tuple{rcq2, 8u, kDst2}}) {
    const auto wcs = poll(cq);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[0].wr_id, wr_id);
    EXPECT_EQ(wcs[0].byte_len, kGrh + 300);
    EXPECT_EQ(wcs[0].src_qp, a.qp->qpn());
    EXPECT_TRUE(wcs[0].wc_flags & IBV_WC_GRH);
    EXPECT_TRUE(same(a, kSrc, b, offset + kGrh, 300));
    EXPECT_TRUE(grh_names_group(b, offset));
  }
  EXPECT_TRUE(poll(a.rcq).empty()) << "the sender is not attached: no copy";
  EXPECT_EQ(a.transport->counters().rx_packets, 0u);
  EXPECT_EQ(b.device->detach_mcast(b2, group_), 0);
  EXPECT_EQ(b.device->destroy_qp(b2), 0);
}

// QPs of two devices; the sender's own QP, attached, gets its copy too (as with
// Soft-RoCE and IP_MULTICAST_LOOP).
TEST_F(McastTest, QpsOfTwoDevicesAndTheAttachedSenderEachGetACopy) {
  ASSERT_EQ(a.device->attach_mcast(a.qp, group_), 0);
  ASSERT_EQ(b.device->attach_mcast(b.qp, group_), 0);
  post_recv(a, kDst, kGrh + 1024, 1);
  post_recv(b, kDst, kGrh + 1024, 2);
  ASSERT_EQ(send_to_group(64, 9, options_.qkey), 0);
  pump();
  const auto at_a = poll(a.rcq);
  const auto at_b = poll(b.rcq);
  ASSERT_EQ(at_a.size(), 1u);
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(at_a[0].src_qp, a.qp->qpn());
  EXPECT_EQ(at_b[0].src_qp, a.qp->qpn());
  EXPECT_TRUE(grh_names_group(a, kDst));
  EXPECT_TRUE(grh_names_group(b, kDst));
}

// IBA 10.2.5: each attached QP checks the Q_Key for itself; a mismatch drops that
// QP's copy only, counted.
TEST_F(McastTest, EachQpChecksItsQkey) {
  Cq* rcq2 = nullptr;
  Qp* b2 = extra_qp(b, rcq2, options_.qkey ^ 0x100);
  ASSERT_NE(b2, nullptr);
  ASSERT_EQ(b.device->attach_mcast(b.qp, group_), 0);
  ASSERT_EQ(b.device->attach_mcast(b2, group_), 0);
  post_recv(b, kDst, kGrh + 1024, 7);
  post_recv_on(b, b2, kDst2, 8);
  ASSERT_EQ(send_to_group(16, 1, options_.qkey), 0);
  pump();
  EXPECT_EQ(poll(b.rcq).size(), 1u);
  EXPECT_TRUE(poll(rcq2).empty());
  EXPECT_EQ(b.counters().ud_bad_qkey.load(), 1u);
  EXPECT_EQ(b.counters().rx_packets.load(), 2u) << "both QPs were handed the packet";
}

TEST_F(McastTest, DetachStopsDeliveryToThatQpOnly) {
  Cq* rcq2 = nullptr;
  Qp* b2 = extra_qp(b, rcq2, options_.qkey);
  ASSERT_NE(b2, nullptr);
  ASSERT_EQ(b.device->attach_mcast(b.qp, group_), 0);
  ASSERT_EQ(b.device->attach_mcast(b2, group_), 0);
  ASSERT_EQ(b.device->detach_mcast(b2, group_), 0);
  post_recv(b, kDst, kGrh + 1024, 7);
  post_recv_on(b, b2, kDst2, 8);
  ASSERT_EQ(send_to_group(16, 1, options_.qkey), 0);
  pump();
  EXPECT_EQ(poll(b.rcq).size(), 1u);
  EXPECT_TRUE(poll(rcq2).empty());
  // The last QP gone, the device leaves the group: nothing reaches it any more.
  ASSERT_EQ(b.device->detach_mcast(b.qp, group_), 0);
  post_recv(b, kDst, kGrh + 1024, 9);
  ASSERT_EQ(send_to_group(16, 2, options_.qkey), 0);
  pump();
  EXPECT_TRUE(poll(b.rcq).empty());
  const auto sent = net_.take_sent();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent.back().fate, transport::fake::Fate::kUndeliverable);
  EXPECT_EQ(poll(a.scq).size(), 2u) << "UD sends complete whoever listens";
}

// A packet to the group that reaches a device without attached QPs (a stale
// membership, or a foreign sender), and DestQP 0xFFFFFF to a unicast address.
TEST_F(McastTest, MulticastQpnWithoutAGroupIsDroppedAndCounted) {
  std::vector<uint8_t> bytes = group_send(0);
  ASSERT_EQ(b.transport->join_group(group_), 0);
  net_.inject(a.device->gids()[1], group_, bytes);
  net_.inject(a.device->gids()[1], b.device->gids()[1], bytes);
  pump();
  EXPECT_EQ(b.counters().rx_mcast_no_group.load(), 1u);
  EXPECT_EQ(b.counters().rx_unknown_qp.load(), 1u);
  EXPECT_EQ(b.transport->leave_group(group_), 0);
}

// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: a copy from one of the device's own GIDs
// whose DETH source QP is the blocked QP is kept from it and counted; the other
// attached QP gets it.
TEST_F(McastTest, ABlockedQpsOwnCopyIsKeptFromItAndCounted) {
  Cq* blocked_rcq = nullptr;
  Qp* blocked = extra_qp(b, blocked_rcq, options_.qkey, true);
  ASSERT_NE(blocked, nullptr);
  ASSERT_EQ(b.device->attach_mcast(b.qp, group_), 0);
  ASSERT_EQ(b.device->attach_mcast(blocked, group_), 0);
  post_recv_on(b, b.qp, 0, 1);
  post_recv_on(b, blocked, 2048, 2);
  std::vector<uint8_t> bytes = group_send(blocked->qpn());
  net_.inject(b.device->gids()[1], group_, bytes);
  pump();
  EXPECT_EQ(poll(b.rcq).size(), 1u) << "the QP without the flag gets the copy";
  EXPECT_TRUE(poll(blocked_rcq).empty());
  EXPECT_EQ(b.counters().rx_mcast_self_blocked.load(), 1u);
  // The same datagram from another device's address is not its own: delivered.
  net_.inject(a.device->gids()[1], group_, bytes);
  pump();
  EXPECT_EQ(poll(blocked_rcq).size(), 1u);
  EXPECT_EQ(b.counters().rx_mcast_self_blocked.load(), 1u);
  EXPECT_EQ(b.device->detach_mcast(blocked, group_), 0);
  EXPECT_EQ(b.device->detach_mcast(b.qp, group_), 0);
}

// ibv_attach_mcast(3) / ibv_detach_mcast(3) errors, as the kernel answers them.
TEST_F(McastTest, AttachAndDetachRefuseWhatTheKernelRefuses) {
  EXPECT_EQ(b.device->attach_mcast(b.qp, b.device->gids()[1]), EINVAL) << "not multicast";
  Gid v6 = {0xff, 0x0e};
  EXPECT_EQ(b.device->attach_mcast(b.qp, v6), 0) << "ff0e:: is an IPv6 group";
  EXPECT_EQ(b.device->detach_mcast(b.qp, v6), 0);
  EXPECT_EQ(b.device->detach_mcast(b.qp, group_), EINVAL) << "not attached";
  ASSERT_EQ(b.device->attach_mcast(b.qp, group_), 0);
  EXPECT_EQ(b.device->attach_mcast(b.qp, group_), 0) << "twice: no error";
  EXPECT_EQ(b.device->destroy_qp(b.qp), EBUSY) << "uverbs: detach first";
  post_recv(b, kDst, kGrh + 1024, 1);
  post_recv(b, kDst2, kGrh + 1024, 2);
  ASSERT_EQ(send_to_group(16, 1, options_.qkey), 0);
  pump();
  EXPECT_EQ(poll(b.rcq).size(), 1u) << "attached twice, still one copy";
  EXPECT_EQ(b.device->detach_mcast(b.qp, group_), 0);
  EXPECT_EQ(b.device->detach_mcast(b.qp, group_), EINVAL) << "one detach undoes both";
  int err = 0;
  QpInit init;
  init.type = IBV_QPT_RC;
  init.send_cq = b.scq;
  init.recv_cq = b.rcq;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  Qp* rc = b.device->create_qp(b.pd, init, err);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(b.device->attach_mcast(rc, group_), EINVAL) << "UD only";
  EXPECT_EQ(b.device->destroy_qp(rc), 0);
}

// The limits ibv_query_device reports are the ones enforced.
TEST_F(McastTest, GroupAndAttachLimitsAreEnforced) {
  const DeviceLimits& lim = b.device->limits();
  ASSERT_GT(lim.max_mcast_grp, 0u);
  for (uint32_t i = 0; i < lim.max_mcast_grp; ++i)
    ASSERT_EQ(b.device->attach_mcast(b.qp, transport::fake::ipv4_gid(239, 9, 0, uint8_t(i))), 0);
  EXPECT_EQ(b.device->attach_mcast(b.qp, transport::fake::ipv4_gid(239, 9, 1, 0)), ENOMEM);
  std::vector<Qp*> qps;
  std::vector<Cq*> cqs(lim.max_mcast_qp_attach);
  for (uint32_t i = 1; i < lim.max_mcast_qp_attach; ++i) {
    qps.push_back(extra_qp(b, cqs[i], options_.qkey));
    ASSERT_EQ(b.device->attach_mcast(qps.back(), transport::fake::ipv4_gid(239, 9, 0, 0)), 0);
  }
  Cq* last_cq = nullptr;
  Qp* one_too_many = extra_qp(b, last_cq, options_.qkey);
  EXPECT_EQ(b.device->attach_mcast(one_too_many, transport::fake::ipv4_gid(239, 9, 0, 0)),
            EINVAL);
}

}  // namespace
}  // namespace softrdma::engine::testing
