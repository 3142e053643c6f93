// UD through the verbs API (ibv_create_ah(3), ibv_init_ah_from_wc(3),
// ibv_create_ah_from_wc(3)): a datagram goes out to an AH, and the answer goes
// back to an AH made from the receive completion and its GRH, as UD servers do.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

constexpr uint32_t kQkey = 0x1234;
constexpr uint32_t kGrh = 40;

struct UdSide {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192);
  ibv_mr* mr = nullptr;

  // `send_ops`: created with ibv_create_qp_ex and these ibv_wr_* operations;
  // `create_flags`: ibv_qp_create_flags.
  void make(ibv_context* ctx, uint64_t send_ops = 0, uint32_t create_flags = 0) {
    pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp_init_attr_ex init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_UD;
    init.cap = {8, 8, 1, 1, 0};
    init.comp_mask = IBV_QP_INIT_ATTR_PD | (send_ops ? IBV_QP_INIT_ATTR_SEND_OPS_FLAGS : 0) |
                     (create_flags ? IBV_QP_INIT_ATTR_CREATE_FLAGS : 0);
    init.create_flags = create_flags;
    init.pd = pd;
    init.send_ops_flags = send_ops;
    qp = ibv_create_qp_ex(ctx, &init);
    ASSERT_NE(qp, nullptr) << errno;
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qkey = kQkey;
    ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                           IBV_QP_QKEY), 0);
    attr.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 7;
    ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  }
  void destroy() {
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  }
  int send(ibv_ah* ah, uint32_t remote_qpn, size_t offset, uint32_t length, uint64_t wr_id) {
    ibv_sge sge{uint64_t(uintptr_t(&buf[offset])), length, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = remote_qpn;
    wr.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
  }
};

TEST(VerbsUd, AnAnswerGoesBackToAnAhMadeFromTheReceiveCompletion) {
  Device dev;
  UdSide server, client;
  server.make(dev.ctx());
  client.make(dev.ctx());
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(dev.ctx(), 1, 1, &gid), 0);
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.sgid_index = 1;
  attr.grh.dgid = gid;
  ibv_ah* to_server = ibv_create_ah(client.pd, &attr);
  ASSERT_NE(to_server, nullptr) << errno;

  ASSERT_EQ(post_recv(server.qp, {uint64_t(uintptr_t(server.buf.data())), 4096, server.mr->lkey}, 1), 0);
  std::memcpy(&client.buf[0], "ping", 4);
  ASSERT_EQ(client.send(to_server, server.qp->qp_num, 0, 4, 2), 0);
  auto got = poll_n(server.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].byte_len, kGrh + 4);
  EXPECT_EQ(got[0].src_qp, client.qp->qp_num);
  EXPECT_EQ(std::memcmp(&server.buf[kGrh], "ping", 4), 0);

  ibv_ah_attr from{};
  auto* grh = reinterpret_cast<ibv_grh*>(server.buf.data());
  ASSERT_EQ(ibv_init_ah_from_wc(dev.ctx(), 1, &got[0], grh, &from), 0);
  EXPECT_EQ(from.is_global, 1);
  ibv_gid local{};  // the GID the message came to (on loopback GIDs 0 and 1 are alike)
  ASSERT_EQ(ibv_query_gid(dev.ctx(), 1, from.grh.sgid_index, &local), 0);
  EXPECT_EQ(std::memcmp(local.raw, gid.raw, 16), 0);
  EXPECT_EQ(std::memcmp(from.grh.dgid.raw, gid.raw, 16), 0) << "the sender's GID";
  ibv_ah* to_client = ibv_create_ah_from_wc(server.pd, &got[0], grh, 1);
  ASSERT_NE(to_client, nullptr) << errno;

  ASSERT_EQ(post_recv(client.qp, {uint64_t(uintptr_t(&client.buf[4096])), 4096, client.mr->lkey}, 3), 0);
  std::memcpy(&server.buf[6000], "pong", 4);
  ASSERT_EQ(server.send(to_client, got[0].src_qp, 6000, 4, 4), 0);
  auto answer = poll_n(client.cq, 2);  // its send, then the answer
  ASSERT_EQ(answer.size(), 2u);
  EXPECT_EQ(answer[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&client.buf[4096 + kGrh], "pong", 4), 0);
  EXPECT_EQ(poll_n(server.cq, 1).size(), 1u);

  EXPECT_EQ(ibv_destroy_ah(to_server), 0);
  EXPECT_EQ(ibv_destroy_ah(to_client), 0);
  server.destroy();
  client.destroy();
}

// ibv_create_ah(3): RoCE needs a GRH; ibv_init_ah_from_wc(3) needs one to read.
TEST(VerbsUd, AhMisuseIsRefused) {
  Device dev;
  ibv_pd* pd = ibv_alloc_pd(dev.ctx());
  ASSERT_NE(pd, nullptr);
  ibv_ah_attr attr{};
  attr.port_num = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL) << "no GRH";
  attr.is_global = 1;
  attr.grh.sgid_index = 200;
  EXPECT_EQ(ibv_create_ah(pd, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL) << "no such GID index";
  EXPECT_EQ(ibv_destroy_ah(nullptr), EINVAL);
  ibv_wc wc{};
  ibv_grh grh{};
  ibv_ah_attr out{};
  EXPECT_EQ(ibv_init_ah_from_wc(dev.ctx(), 1, &wc, &grh, &out), -1) << "no IBV_WC_GRH";
  attr.grh.sgid_index = 1;
  ibv_ah* ah = ibv_create_ah(pd, &attr);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "the AH uses the PD";
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// ibv_wr_set_ud_addr(3): an extended UD QP addresses each WR it builds; UD has
// SEND (with immediate) only (IBA Table 39), so other send_ops are refused.
TEST(VerbsUd, ExtendedQpAddressesEachWrItBuilds) {
  Device dev;
  UdSide server, client;
  server.make(dev.ctx());
  client.make(dev.ctx(), IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(dev.ctx(), 1, 1, &gid), 0);
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.sgid_index = 1;
  attr.grh.dgid = gid;
  ibv_ah* ah = ibv_create_ah(client.pd, &attr);
  ASSERT_NE(ah, nullptr);
  ASSERT_EQ(post_recv(server.qp, {uint64_t(uintptr_t(server.buf.data())), 4096, server.mr->lkey}, 1), 0);
  std::memcpy(&client.buf[0], "wr-ud", 5);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(client.qp);
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = 9;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(qpx, htonl(0x77));
  ibv_wr_set_ud_addr(qpx, ah, server.qp->qp_num, kQkey);
  ibv_wr_set_sge(qpx, client.mr->lkey, uint64_t(uintptr_t(client.buf.data())), 5);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  auto got = poll_n(server.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].byte_len, kGrh + 5);
  EXPECT_EQ(got[0].imm_data, htonl(0x77));
  EXPECT_EQ(std::memcmp(&server.buf[kGrh], "wr-ud", 5), 0);
  EXPECT_EQ(poll_n(client.cq, 1).size(), 1u);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  server.destroy();
  client.destroy();

  ibv_pd* pd = ibv_alloc_pd(dev.ctx());
  ibv_cq* cq = ibv_create_cq(dev.ctx(), 4, nullptr, nullptr, 0);
  ibv_qp_init_attr_ex init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_UD;
  init.cap = {4, 4, 1, 1, 0};
  init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  init.pd = pd;
  init.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(dev.ctx(), &init), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// A multicast GID of this test process's own (::ffff:239.x.y.z): test processes
// running at once on this host never share a group.
ibv_gid own_group(uint8_t salt) {
  ibv_gid gid{};
  gid.raw[10] = gid.raw[11] = 0xff;
  gid.raw[12] = 239;
  gid.raw[13] = uint8_t(getpid() >> 8);
  gid.raw[14] = uint8_t(getpid());
  gid.raw[15] = salt;
  return gid;
}

// An AH to `group` (the device's GID 1 as source), as a multicast sender makes it.
ibv_ah* group_ah(ibv_pd* pd, const ibv_gid& group) {
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.sgid_index = 1;
  attr.grh.dgid = group;
  return ibv_create_ah(pd, &attr);
}

// ibv_attach_mcast(3) through real IP multicast on loopback: two attached QPs each
// get the datagram a third QP sends to the group (DestQP 0xFFFFFF, an AH with the
// group's GID), with the group as the GRH's destination.
TEST(VerbsMulticast, EveryAttachedQpGetsTheMessageSentToTheGroup) {
  Device dev;
  UdSide first, second, sender;
  first.make(dev.ctx());
  second.make(dev.ctx());
  sender.make(dev.ctx());
  const ibv_gid group = own_group(1);
  ASSERT_EQ(ibv_attach_mcast(first.qp, &group, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(second.qp, &group, 0), 0);
  for (UdSide* side : {&first, &second})
    ASSERT_EQ(post_recv(side->qp, {uint64_t(uintptr_t(side->buf.data())), 4096, side->mr->lkey}, 1), 0);
  ibv_ah* to_group = group_ah(sender.pd, group);
  ASSERT_NE(to_group, nullptr) << errno;
  std::memcpy(&sender.buf[0], "all", 3);
  ASSERT_EQ(sender.send(to_group, 0xffffff, 0, 3, 2), 0);
  for (UdSide* side : {&first, &second}) {
    auto got = poll_n(side->cq, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(got[0].byte_len, kGrh + 3);
    EXPECT_EQ(got[0].src_qp, sender.qp->qp_num);
    EXPECT_TRUE(got[0].wc_flags & IBV_WC_GRH);
    EXPECT_EQ(std::memcmp(&side->buf[kGrh], "all", 3), 0);
    EXPECT_EQ(std::memcmp(&side->buf[20 + 16], &group.raw[12], 4), 0) << "GRH: the group";
  }
  EXPECT_EQ(poll_n(sender.cq, 1).size(), 1u) << "the send's completion, and no copy";
  EXPECT_EQ(ibv_destroy_ah(to_group), 0);
  EXPECT_EQ(ibv_detach_mcast(first.qp, &group, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(second.qp, &group, 0), 0);
  first.destroy();
  second.destroy();
  sender.destroy();
}

// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (ibv_create_qp_ex(3), mckey -l): a QP made
// with it gets every copy sent to its group but the ones it sent itself; a QP
// without it gets its own too. Only UD QPs take the flag.
TEST(VerbsMulticast, BlockedQpGetsNoCopyOfItsOwnDatagrams) {
  Device dev;
  UdSide looping, blocked;
  looping.make(dev.ctx());
  blocked.make(dev.ctx(), 0, IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
  const ibv_gid group = own_group(3);
  for (UdSide* side : {&looping, &blocked}) {
    ASSERT_EQ(ibv_attach_mcast(side->qp, &group, 0), 0);
    for (uint64_t i = 0; i < 2; ++i)
      ASSERT_EQ(post_recv(side->qp, {uint64_t(uintptr_t(&side->buf[4096 + i * 2048])), 2048,
                                     side->mr->lkey}, i), 0);
  }
  ibv_ah* from_blocked = group_ah(blocked.pd, group);
  ibv_ah* from_looping = group_ah(looping.pd, group);
  ASSERT_NE(from_blocked, nullptr);
  ASSERT_NE(from_looping, nullptr);
  // The blocked QP sends first: had it a copy of its own, the copy would come
  // before the other QP's datagram, which both receive.
  ASSERT_EQ(blocked.send(from_blocked, 0xffffff, 0, 4, 1), 0);
  std::vector<ibv_wc> blocked_got = poll_n(blocked.cq, 1);  // its send's completion
  ASSERT_EQ(blocked_got.size(), 1u);
  ASSERT_EQ(looping.send(from_looping, 0xffffff, 0, 4, 2), 0);
  auto looping_got = poll_n(looping.cq, 3);  // its send, then two copies
  ASSERT_EQ(looping_got.size(), 3u);
  int own_copies = 0;
  for (const ibv_wc& wc : looping_got)
    if (wc.opcode == IBV_WC_RECV && wc.src_qp == looping.qp->qp_num) ++own_copies;
  EXPECT_EQ(own_copies, 1) << "without the flag, a QP gets its own datagram";
  // Until the other QP's copy: every receive completion the blocked QP has.
  auto has_others = [&] {
    return std::any_of(blocked_got.begin(), blocked_got.end(), [&](const ibv_wc& wc) {
      return wc.opcode == IBV_WC_RECV && wc.src_qp == looping.qp->qp_num;
    });
  };
  while (!has_others()) {
    auto got = poll_n(blocked.cq, 1);
    ASSERT_EQ(got.size(), 1u);
    blocked_got.push_back(got[0]);
  }
  ibv_wc more{};
  while (ibv_poll_cq(blocked.cq, 1, &more) == 1) blocked_got.push_back(more);
  for (const ibv_wc& wc : blocked_got)
    EXPECT_FALSE(wc.opcode == IBV_WC_RECV && wc.src_qp == blocked.qp->qp_num)
        << "a copy of its own reached the blocked QP";
  for (UdSide* side : {&looping, &blocked}) EXPECT_EQ(ibv_detach_mcast(side->qp, &group, 0), 0);
  EXPECT_EQ(ibv_destroy_ah(from_blocked), 0);
  EXPECT_EQ(ibv_destroy_ah(from_looping), 0);

  ibv_qp_init_attr_ex rc{};
  rc.send_cq = rc.recv_cq = looping.cq;
  rc.qp_type = IBV_QPT_RC;
  rc.cap = {4, 4, 1, 1, 0};
  rc.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  rc.pd = looping.pd;
  rc.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(dev.ctx(), &rc), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP) << "UD only";
  looping.destroy();
  blocked.destroy();
}

// The kernel's answers (ib_attach_mcast, uverbs, rxe): EINVAL for a GID that is
// not multicast, a QP that is not UD, a group the QP is not attached to; a second
// attach is no error; EBUSY to destroy a QP still attached. Limits as reported.
TEST(VerbsMulticast, MisuseGetsTheKernelsErrno) {
  Device dev;
  UdSide ud;
  ud.make(dev.ctx());
  const ibv_gid group = own_group(2);
  ibv_gid unicast{};
  ASSERT_EQ(ibv_query_gid(dev.ctx(), 1, 1, &unicast), 0);
  EXPECT_EQ(ibv_attach_mcast(ud.qp, &unicast, 0), EINVAL);
  EXPECT_EQ(ibv_attach_mcast(ud.qp, nullptr, 0), EINVAL);
  EXPECT_EQ(ibv_detach_mcast(ud.qp, &group, 0), EINVAL) << "not attached";
  ibv_gid v6{};
  v6.raw[0] = 0xff;
  v6.raw[1] = 0x0e;
  v6.raw[15] = 1;
  EXPECT_EQ(ibv_attach_mcast(ud.qp, &v6, 0), EOPNOTSUPP)
      << "an IPv6 group from a loopback IPv4 address: lo carries no IPv6 multicast";
  ASSERT_EQ(ibv_attach_mcast(ud.qp, &group, 0), 0);
  EXPECT_EQ(ibv_attach_mcast(ud.qp, &group, 0), 0);
  EXPECT_EQ(ibv_destroy_qp(ud.qp), EBUSY);
  EXPECT_EQ(ibv_detach_mcast(ud.qp, &group, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(ud.qp, &group, 0), EINVAL);

  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = ud.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {4, 4, 1, 1, 0};
  ibv_qp* rc = ibv_create_qp(ud.pd, &init);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(ibv_attach_mcast(rc, &group, 0), EINVAL) << "UD only";
  EXPECT_EQ(ibv_destroy_qp(rc), 0);

  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(dev.ctx(), &attr), 0);
  EXPECT_GT(attr.max_mcast_grp, 0);
  EXPECT_GT(attr.max_mcast_qp_attach, 0);
  EXPECT_GE(attr.max_total_mcast_qp_attach, attr.max_mcast_qp_attach);
  ud.destroy();
}

}  // namespace
}  // namespace softrdma::verbs::testing

// softrdma's own export for its librdmacm: QP1 of the device, a UD QP with QPN 1
// (IBA 13.5.1); one per device (EBUSY), UD only (EINVAL).
extern "C" ibv_qp* softrdma_create_gsi_qp(ibv_pd* pd, ibv_qp_init_attr* attr);

namespace softrdma::verbs::testing {
namespace {

TEST(VerbsGsi, QpOneOncePerDevice) {
  Pair pair;
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = pair.a.cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  EXPECT_EQ(softrdma_create_gsi_qp(pair.a.pd, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.qp_type = IBV_QPT_UD;
  ibv_qp* gsi = softrdma_create_gsi_qp(pair.a.pd, &attr);
  ASSERT_NE(gsi, nullptr) << errno;
  EXPECT_EQ(gsi->qp_num, 1u);
  EXPECT_EQ(softrdma_create_gsi_qp(pair.a.pd, &attr), nullptr);
  EXPECT_EQ(errno, EBUSY);
  ibv_qp* ordinary = ibv_create_qp(pair.a.pd, &attr);
  ASSERT_NE(ordinary, nullptr);
  EXPECT_GT(ordinary->qp_num, 1u);
  EXPECT_EQ(ibv_destroy_qp(ordinary), 0);
  EXPECT_EQ(ibv_destroy_qp(gsi), 0);
  gsi = softrdma_create_gsi_qp(pair.a.pd, &attr);  // free again once destroyed
  ASSERT_NE(gsi, nullptr);
  EXPECT_EQ(ibv_destroy_qp(gsi), 0);
}

}  // namespace
}  // namespace softrdma::verbs::testing
