// The device (DESIGN.md §6-7; IBA 10.2, 9.6): GID table, QP numbers, object
// lifetimes (EBUSY while in use), and the receive path's handling of packets that
// are not for a ready QP: dropped, counted by reason, never a crash.
#include "engine/device.h"
#include "engine/roce/family.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "engine/rc/connection.h"
#include "transport/fake/fake_network.h"
#include "wire/fields.h"
#include "wire/opcodes.h"
#include "wire/packet.h"

namespace softrdma::engine {
namespace {

namespace fake = transport::fake;
namespace op = wire::op;
using transport::Gid;

const Gid kLocal = fake::ipv4_gid(10, 1, 2, 3);
const Gid kPeer = fake::ipv4_gid(10, 1, 2, 4);
const Gid kStranger = fake::ipv4_gid(10, 9, 9, 9);

// A packet for injection: headers zeroed, then the BTH fields a test cares about.
std::vector<uint8_t> make_packet(uint8_t opcode, uint32_t dest_qp, uint32_t psn,
                                 size_t payload = 0, uint16_t pkey = 0xffff) {
  std::vector<uint8_t> bytes(wire::packet_bytes(opcode, payload));
  wire::PacketView p = wire::build_packet(bytes, opcode, payload);
  p.set(wire::bth::kPkey, pkey);
  p.set(wire::bth::kDestQp, dest_qp);
  p.set(wire::bth::kPsn, psn);
  p.set(wire::bth::kAckReq, 1);
  for (size_t i = 0; i < payload; ++i) p.payload()[i] = uint8_t(i);
  return bytes;
}

// The counters one received packet lands in (exactly one of them per packet).
uint64_t dispatch_total(EngineCounters& c) {
  return c.rx_malformed + c.rx_unknown_qp + c.rx_wrong_transport + c.rx_bad_pkey + c.rx_packets;
}

// A transport that says it serves `gids` (as the UDP transport does when the
// interface has an IPv6 link-local address); everything else is the inner one's.
class ServedAddresses final : public transport::Transport {
 public:
  ServedAddresses(transport::Transport& inner, std::vector<Gid> gids)
      : inner_(inner), gids_(std::move(gids)) {}
  size_t tx_burst(std::span<transport::TxPacket> p) override { return inner_.tx_burst(p); }
  size_t rx_burst(std::span<transport::RxPacket> p) override { return inner_.rx_burst(p); }
  int rx_fd() const override { return inner_.rx_fd(); }
  Gid local_gid() const override { return gids_.front(); }
  std::vector<Gid> local_gids() const override { return gids_; }
  transport::TransportCounters counters() const override { return inner_.counters(); }
  std::string describe() const override { return inner_.describe(); }

 private:
  transport::Transport& inner_;
  std::vector<Gid> gids_;
};

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = net_.attach(kLocal);
    device_ = std::make_unique<Device>(DeviceConfig{}, *transport_, roce::RoceFamily::maker(), clock_);
    int err = 0;
    pd_ = device_->alloc_pd(err);
    scq_ = device_->create_cq(64, err);
    rcq_ = device_->create_cq(64, err);
    buf_.assign(4096, 0);
    mr_ = device_->reg_mr(pd_, buf_.data(), buf_.size(), uint64_t(uintptr_t(buf_.data())),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
                          err);
    ASSERT_NE(mr_, nullptr);
  }

  Qp* make_qp(Cq* scq = nullptr, Cq* rcq = nullptr) {
    QpInit init;
    init.send_cq = scq != nullptr ? scq : scq_;
    init.recv_cq = rcq != nullptr ? rcq : rcq_;
    init.cap = ibv_qp_cap{8, 8, 2, 2, 0};
    int err = 0;
    Qp* qp = device_->create_qp(pd_, init, err);
    EXPECT_NE(qp, nullptr) << err;
    return qp;
  }

  // RESET -> INIT -> RTR connected to `peer_gid` / `peer_qpn`, expecting `rq_psn`.
  void to_rtr(Qp* qp, const Gid& peer_gid, uint32_t peer_qpn, uint32_t rq_psn) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(qp->modify(a, IBV_QP_STATE), 0);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags =
        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                IBV_QP_ACCESS_FLAGS), 0);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer_gid.data(), 16);
    ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                IBV_QP_MIN_RNR_TIMER), 0);
  }

  void post_recv(Qp* qp, uint64_t wr_id, uint32_t length = 256) {
    ibv_sge sge{uint64_t(uintptr_t(buf_.data())), length, mr_->key};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(qp->post_recv(&wr, &bad), 0);
  }

  void inject(const Gid& from, std::vector<uint8_t> bytes) {
    net_.inject(from, kLocal, std::move(bytes));
  }
  // Runs the device until the transport has nothing queued.
  void drain_rx() {
    for (int i = 0; i < 10000 && transport_->queued() > 0; ++i) device_->progress();
    device_->progress();
  }
  // Packets the device sent (injected ones are in the log too: skip those to us).
  std::vector<fake::FakePacket> sent_by_device() {
    std::vector<fake::FakePacket> out;
    for (auto& p : net_.take_sent())
      if (p.src == kLocal) out.push_back(std::move(p));
    return out;
  }

  fake::FakeNetwork net_;
  ManualClock clock_;
  std::unique_ptr<fake::FakeTransport> transport_;
  std::unique_ptr<Device> device_;
  Pd* pd_ = nullptr;
  Cq* scq_ = nullptr;
  Cq* rcq_ = nullptr;
  std::vector<uint8_t> buf_;
  Mr* mr_ = nullptr;
};

// ---------------------------------------------------------------------------------
// GID table and QP numbers.
// ---------------------------------------------------------------------------------

// A transport that serves only an IPv4 address: GID 1 its IPv4-mapped form (Soft-RoCE's
// index for IPv4), GID 0 the same GID, not an address the host may not have
// (docs/decisions/gid-table.md).
TEST_F(DeviceTest, GidTableFromIpv4Address) {
  const auto& gids = device_->gids();
  ASSERT_EQ(gids.size(), 2u);
  const Gid mapped = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3};
  EXPECT_EQ(gids[1], mapped);
  EXPECT_EQ(gids[0], mapped);
}

// A transport that serves the interface's IPv6 link-local address too: GID 0 is that
// address (as Soft-RoCE lists it), GID 1 the IPv4-mapped one.
TEST_F(DeviceTest, GidTableWithServedLinkLocalAddress) {
  const Gid mapped = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 9};
  const Gid link_local = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
  auto inner = net_.attach(mapped);
  ServedAddresses served(*inner, {mapped, link_local});
  Device d(DeviceConfig{}, served, roce::RoceFamily::maker());
  ASSERT_EQ(d.gids().size(), 2u);
  EXPECT_EQ(d.gids()[0], link_local);
  EXPECT_EQ(d.gids()[1], mapped);
}

// An IPv6 address is the one GID of the table (RoCEv2 over IPv6, IBA A17.4).
TEST_F(DeviceTest, GidTableFromIpv6Address) {
  const Gid v6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  auto t = net_.attach(v6);
  Device d(DeviceConfig{}, *t, roce::RoceFamily::maker());
  ASSERT_EQ(d.gids().size(), 1u);
  EXPECT_EQ(d.gids()[0], v6);
}

// QP numbers are above the reserved QP0/QP1, fit 24 bits and are unique among live
// QPs, also after QPs are destroyed and others created (IBA 10.2.4; DESIGN.md §6).
TEST_F(DeviceTest, QpnsAreAboveOneAndUnique) {
  std::vector<Qp*> qps;
  std::set<uint32_t> live;
  for (int i = 0; i < 1000; ++i) {
    Qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    EXPECT_GT(qp->qpn(), 1u);
    EXPECT_LE(qp->qpn(), 0xffffffu);
    EXPECT_TRUE(live.insert(qp->qpn()).second) << "duplicate QPN " << qp->qpn();
    qps.push_back(qp);
  }
  for (size_t i = 0; i < qps.size(); i += 2) {
    live.erase(qps[i]->qpn());
    ASSERT_EQ(device_->destroy_qp(qps[i]), 0);
  }
  for (int i = 0; i < 500; ++i) {
    Qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    EXPECT_GT(qp->qpn(), 1u);
    EXPECT_TRUE(live.insert(qp->qpn()).second) << "duplicate QPN " << qp->qpn();
  }
}

// ---------------------------------------------------------------------------------
// Object lifetimes.
// ---------------------------------------------------------------------------------

// A CQ used by a QP (as send or receive CQ) cannot be destroyed: EBUSY until the QP
// is gone (ibv_create_cq(3) NOTES: "ibv_destroy_cq() fails if any queue pair is still
// associated with this CQ").
TEST_F(DeviceTest, DestroyCqInUseIsEbusy) {
  int err = 0;
  Cq* s = device_->create_cq(8, err);
  Cq* r = device_->create_cq(8, err);
  Qp* qp = make_qp(s, r);
  EXPECT_EQ(device_->destroy_cq(s), EBUSY);
  EXPECT_EQ(device_->destroy_cq(r), EBUSY);
  ASSERT_EQ(device_->destroy_qp(qp), 0);
  EXPECT_EQ(device_->destroy_cq(s), 0);
  EXPECT_EQ(device_->destroy_cq(r), 0);
}

// A PD used by a QP or an MR cannot be deallocated: EBUSY (ibv_alloc_pd(3): fails
// if any other resource is still associated with the PD).
TEST_F(DeviceTest, DeallocPdInUseIsEbusy) {
  int err = 0;
  Pd* pd = device_->alloc_pd(err);
  QpInit init;
  init.send_cq = scq_;
  init.recv_cq = rcq_;
  init.cap = ibv_qp_cap{1, 1, 1, 1, 0};
  Qp* qp = device_->create_qp(pd, init, err);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(device_->dealloc_pd(pd), EBUSY);
  ASSERT_EQ(device_->destroy_qp(qp), 0);
  Mr* mr = device_->reg_mr(pd, buf_.data(), 16, 0, 0, err);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(device_->dealloc_pd(pd), EBUSY);
  ASSERT_EQ(device_->dereg_mr(mr), 0);
  EXPECT_EQ(device_->dealloc_pd(pd), 0);
}

// The device limits are enforced: one object more than max_pd / max_cq / max_qp /
// max_mr is refused with ENOMEM ("insufficient resources", ibv_alloc_pd(3),
// ibv_create_cq(3), ibv_create_qp(3), ibv_reg_mr(3)) and freeing one makes room.
TEST_F(DeviceTest, ObjectCountsAreBoundedByTheLimits) {
  auto t = net_.attach(kStranger);
  DeviceConfig config;
  config.limits.max_pd = 2;
  config.limits.max_cq = 2;
  config.limits.max_qp = 2;
  config.limits.max_mr = 2;
  Device d(config, *t, roce::RoceFamily::maker());
  int err = 0;
  Pd* pd = d.alloc_pd(err);
  Pd* pd2 = d.alloc_pd(err);
  ASSERT_NE(pd2, nullptr);
  EXPECT_EQ(d.alloc_pd(err), nullptr);
  EXPECT_EQ(err, ENOMEM);
  Cq* cq = d.create_cq(4, err);
  ASSERT_NE(d.create_cq(4, err), nullptr);
  EXPECT_EQ(d.create_cq(4, err), nullptr);
  EXPECT_EQ(err, ENOMEM);
  QpInit init;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap = ibv_qp_cap{1, 1, 1, 1, 0};
  Qp* qp = d.create_qp(pd, init, err);
  ASSERT_NE(qp, nullptr);
  ASSERT_NE(d.create_qp(pd, init, err), nullptr);
  EXPECT_EQ(d.create_qp(pd, init, err), nullptr);
  EXPECT_EQ(err, ENOMEM);
  ASSERT_EQ(d.destroy_qp(qp), 0);
  EXPECT_NE(d.create_qp(pd, init, err), nullptr) << "room again after a destroy";
  Mr* mr = d.reg_mr(pd, buf_.data(), 16, 0, 0, err);
  ASSERT_NE(d.reg_mr(pd, buf_.data(), 16, 0, 0, err), nullptr);
  EXPECT_EQ(d.reg_mr(pd, buf_.data(), 16, 0, 0, err), nullptr);
  EXPECT_EQ(err, ENOMEM);
  ASSERT_EQ(d.dereg_mr(mr), 0);
  EXPECT_NE(d.reg_mr(pd, buf_.data(), 16, 0, 0, err), nullptr);
}

// ---------------------------------------------------------------------------------
// Received packets (DESIGN.md §7: untrusted; IBA 9.6 packet checks).
// ---------------------------------------------------------------------------------

// Positive control: a well-formed SEND ONLY from the connected peer with the expected
// PSN is delivered, completes the receive and is acknowledged (IBA 9.7.5.1).
TEST_F(DeviceTest, ValidRequestIsDelivered) {
  Qp* qp = make_qp();
  to_rtr(qp, kPeer, 0x77, 100);
  post_recv(qp, 5);
  net_.take_sent();
  inject(kPeer, make_packet(op::kRcSendOnly, qp->qpn(), 100, 16));
  drain_rx();
  EXPECT_EQ(device_->counters().rx_packets.load(), 1u);
  ibv_wc wc{};
  ASSERT_EQ(rcq_->poll(1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 16u);
  auto sent = sent_by_device();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode(), op::kRcAcknowledge);
  EXPECT_EQ(sent[0].dest_qp(), 0x77u);
}

// A packet for a QPN that does not exist is dropped and counted as rx_unknown_qp;
// nothing is sent back (IBA 9.6.1.1: silently dropped).
TEST_F(DeviceTest, UnknownQpnIsDroppedAndCounted) {
  Qp* qp = make_qp();
  to_rtr(qp, kPeer, 0x77, 0);
  net_.take_sent();
  const uint32_t unknown = (qp->qpn() + 1) & 0xffffff;
  inject(kPeer, make_packet(op::kRcSendOnly, unknown, 0, 8));
  inject(kPeer, make_packet(op::kRcAcknowledge, 0, 0));   // QP0
  inject(kPeer, make_packet(op::kRcReadRequest, 1, 0));  // QP1
  drain_rx();
  EXPECT_EQ(device_->counters().rx_unknown_qp.load(), 3u);
  EXPECT_EQ(device_->counters().rx_packets.load(), 0u);
  EXPECT_TRUE(sent_by_device().empty());
}

// A P_Key that does not match the QP's partition is dropped and counted as
// rx_bad_pkey; the receive WQE is untouched (IBA 9.6.1.1, 10.9.3).
TEST_F(DeviceTest, WrongPkeyIsDroppedAndCounted) {
  Qp* qp = make_qp();
  to_rtr(qp, kPeer, 0x77, 0);
  post_recv(qp, 1);
  net_.take_sent();
  for (uint16_t pkey : {0x1234, 0x0000, 0x8000, 0xfffe}) {
    inject(kPeer, make_packet(op::kRcSendOnly, qp->qpn(), 0, 8, pkey));
  }
  drain_rx();
  EXPECT_EQ(device_->counters().rx_bad_pkey.load(), 4u);
  EXPECT_EQ(device_->counters().rx_packets.load(), 0u);
  EXPECT_EQ(qp->rq().size(), 1u);
  EXPECT_EQ(rcq_->depth(), 0u);
  EXPECT_TRUE(sent_by_device().empty());
}

// P_Key matching compares the low 15 bits and needs one full member (IBA 10.9.3):
// 0x7fff, a limited member of the default partition, matches the full 0xffff.
TEST_F(DeviceTest, LimitedMemberOfDefaultPartitionMatches) {
  Qp* qp = make_qp();
  to_rtr(qp, kPeer, 0x77, 0);
  post_recv(qp, 1);
  inject(kPeer, make_packet(op::kRcSendOnly, qp->qpn(), 0, 8, 0x7fff));
  drain_rx();
  EXPECT_EQ(device_->counters().rx_bad_pkey.load(), 0u);
  EXPECT_EQ(device_->counters().rx_packets.load(), 1u);
  EXPECT_EQ(rcq_->depth(), 1u);
}

// Malformed packets (unknown opcode, TVer != 0, shorter than their headers, a pad
// count larger than the payload) are dropped and counted as rx_malformed (IBA 9.2,
// 9.6.1.1; DESIGN.md §7).
TEST_F(DeviceTest, MalformedPacketsAreDroppedAndCounted) {
  Qp* qp = make_qp();
  to_rtr(qp, kPeer, 0x77, 0);
  post_recv(qp, 1);
  net_.take_sent();
  std::vector<std::vector<uint8_t>> bad;
  auto unknown_opcode = make_packet(op::kRcSendOnly, qp->qpn(), 0, 8);
  unknown_opcode[0] = 0x1f;  // reserved RC opcode
  bad.push_back(unknown_opcode);
  auto xrc = make_packet(op::kRcSendOnly, qp->qpn(), 0, 8);
  xrc[0] = 0xff;
  bad.push_back(xrc);
  auto tver = make_packet(op::kRcSendOnly, qp->qpn(), 0, 8);
  tver[1] |= 0x01;  // TVer 1
  bad.push_back(tver);
  auto short_reth = make_packet(op::kRcWriteOnly, qp->qpn(), 0, 0);
  short_reth.resize(wire::kBthBytes + 8 + wire::kIcrcBytes);  // RETH cut in half
  bad.push_back(short_reth);
  auto short_atomic = make_packet(op::kRcCompareSwap, qp->qpn(), 0, 0);
  short_atomic.resize(short_atomic.size() - 8);
  bad.push_back(short_atomic);
  auto big_pad = make_packet(op::kRcSendOnly, qp->qpn(), 0, 0);
  wire::PacketView(big_pad).set(wire::bth::kPadCount, 3);  // 3 pad bytes, 0 there
  bad.push_back(big_pad);
  for (auto& b : bad) inject(kPeer, b);
  drain_rx();
  EXPECT_EQ(device_->counters().rx_malformed.load(), bad.size());
  EXPECT_EQ(device_->counters().rx_packets.load(), 0u);
  EXPECT_EQ(qp->rq().size(), 1u);
  EXPECT_TRUE(sent_by_device().empty());
}

// A UD or UC packet for an RC QP is dropped and counted as rx_wrong_transport
// (IBA 9.6.1.1: the opcode's transport must be the QP's).
TEST_F(DeviceTest, OtherTransportsOpcodeIsDropped) {
  Qp* qp = make_qp();
  to_rtr(qp, kPeer, 0x77, 0);
  post_recv(qp, 1);
  net_.take_sent();
  inject(kPeer, make_packet(op::kUdSendOnly, qp->qpn(), 0, 8));
  inject(kPeer, make_packet(op::kUc | op::kSendOnly, qp->qpn(), 0, 8));
  drain_rx();
  EXPECT_EQ(device_->counters().rx_wrong_transport.load(), 2u);
  EXPECT_EQ(qp->rq().size(), 1u);
  EXPECT_TRUE(sent_by_device().empty());
}

// A request from anyone but the connected peer is dropped (rx_wrong_source): an RC QP
// talks to one remote QP only (IBA 9.6.1.1, A17.4).
TEST_F(DeviceTest, RequestFromAStrangerIsDropped) {
  Qp* qp = make_qp();
  to_rtr(qp, kPeer, 0x77, 0);
  post_recv(qp, 1);
  net_.take_sent();
  inject(kStranger, make_packet(op::kRcSendOnly, qp->qpn(), 0, 8));
  drain_rx();
  EXPECT_EQ(device_->counters().rx_wrong_source.load(), 1u);
  EXPECT_EQ(qp->rq().size(), 1u);
  EXPECT_EQ(rcq_->depth(), 0u);
  EXPECT_TRUE(sent_by_device().empty());
}

// A QP in Reset or Init (also one that was connected before) drops requests without
// answering and keeps its receive WQEs (IBA 10.3.1: "incoming packets are silently
// dropped" in Reset and Init).
TEST_F(DeviceTest, QpNotReadyDropsRequests) {
  Qp* qp = make_qp();
  to_rtr(qp, kPeer, 0x77, 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE), 0);
  inject(kPeer, make_packet(op::kRcSendOnly, qp->qpn(), 0, 8));
  drain_rx();
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  post_recv(qp, 1);
  net_.take_sent();
  inject(kPeer, make_packet(op::kRcSendOnly, qp->qpn(), 0, 8));
  inject(kPeer, make_packet(op::kRcWriteOnly, qp->qpn(), 0, 8));
  drain_rx();
  EXPECT_EQ(qp->rq().size(), 1u);
  EXPECT_EQ(rcq_->depth(), 0u);
  EXPECT_TRUE(sent_by_device().empty());
  EXPECT_EQ(device_->counters().rx_qp_not_ready + device_->counters().rx_wrong_source, 3u);
}

// Every packet lands in exactly one dispatch counter, and none of a mass of random
// and truncated packets crashes the device, also when they hit a ready QP with the
// right P_Key, source and PSN (DESIGN.md §7: "never a crash or an out-of-bounds
// access"; run under ASan/UBSan).
TEST_F(DeviceTest, RandomAndTruncatedPacketsNeverCrash) {
  Qp* qp = make_qp();
  auto* rc = dynamic_cast<rc::RcConnection*>(&qp->protocol());
  ASSERT_NE(rc, nullptr);
  std::mt19937_64 rng(20240611);
  size_t injected = 0;
  auto ready = [&] {
    if (qp->state() != IBV_QPS_RTR) {
      to_rtr(qp, kPeer, 0x77, uint32_t(rng()) & 0xffffff);
      for (int i = 0; i < 4; ++i) post_recv(qp, uint64_t(i), 1 + uint32_t(rng() % 2048));
    }
  };
  for (int round = 0; round < 3000; ++round) {
    ready();
    std::vector<uint8_t> bytes;
    const int kind = int(rng() % 3);
    if (kind == 0) {
      // Pure noise of any length from the minimum up.
      bytes.resize(16 + rng() % 200);
      for (auto& b : bytes) b = uint8_t(rng());
    } else {
      // A structurally valid packet with random header fields, aimed at the QP,
      // then maybe cut short.
      uint8_t opcode;
      do opcode = uint8_t(rng()); while (!wire::kOpcodes[opcode].valid());
      const size_t payload = wire::kOpcodes[opcode].any(wire::kOpPayload) ? rng() % 1100 : 0;
      bytes = make_packet(opcode, qp->qpn(), rc->responder().expected_psn(), payload);
      wire::PacketView p(bytes);
      const auto& info = p.info();
      for (size_t h = 1; h < wire::kNumHeaders; ++h) {
        if (!info.has(wire::Header(h))) continue;
        const size_t at = info.offset[h];
        for (size_t i = 0; i < wire::kHeaderBytes[h]; ++i) bytes[at + i] = uint8_t(rng());
      }
      if (info.has(wire::Header::kReth) && rng() % 4 == 0)
        p.set(wire::reth::kVa, uint64_t(uintptr_t(buf_.data())) + rng() % 5000);
      if (rng() % 8 == 0) p.set(wire::bth::kPsn, uint32_t(rng()));
      if (kind == 2 && bytes.size() > 16) bytes.resize(16 + rng() % (bytes.size() - 15));
    }
    if (bytes.size() < 16) bytes.resize(16);
    inject(rng() % 8 == 0 ? kStranger : kPeer, std::move(bytes));
    ++injected;
    if (round % 7 == 0) {
      drain_rx();
      clock_.advance(1'000'000);
    }
  }
  drain_rx();
  EXPECT_EQ(dispatch_total(device_->counters()), injected);
  EXPECT_EQ(transport_->counters().rx_bad_icrc, 0u);
}

// Both GIDs carry traffic (DESIGN.md §6): two devices whose QPs name each other by
// GID index 0 (what rdma-core's tests pick) exchange a SEND.
TEST_F(DeviceTest, GidIndexZeroCarriesTraffic) {
  auto peer_transport = net_.attach(kPeer);
  Device peer(DeviceConfig{}, *peer_transport, roce::RoceFamily::maker(), clock_);
  int err = 0;
  Pd* ppd = peer.alloc_pd(err);
  Cq* pcq = peer.create_cq(16, err);
  QpInit init;
  init.send_cq = pcq;
  init.recv_cq = pcq;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  Qp* pqp = peer.create_qp(ppd, init, err);
  ASSERT_NE(pqp, nullptr);
  Qp* qp = make_qp();

  auto connect = [](Qp* q, const Device& remote, uint32_t remote_qpn) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    ASSERT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = 0;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gids()[0].data(), 16);
    ASSERT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                               IBV_QP_MIN_RNR_TIMER), 0);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    ASSERT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                               IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC), 0);
  };
  connect(qp, peer, pqp->qpn());
  connect(pqp, *device_, qp->qpn());

  ibv_recv_wr rwr{};
  rwr.wr_id = 9;
  const ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(pqp->post_recv(&rwr, &rbad), 0);
  ibv_send_wr swr{};
  swr.wr_id = 8;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  const ibv_send_wr* sbad = nullptr;
  ASSERT_EQ(qp->post_send(&swr, &sbad), 0);
  for (int i = 0; i < 100; ++i) {
    device_->progress();
    peer.progress();
  }
  ibv_wc wc{};
  ASSERT_EQ(pcq->poll(1, &wc), 1) << "the SEND did not arrive";
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(scq_->poll(1, &wc), 1) << "the SEND was not acknowledged";
  EXPECT_EQ(wc.wr_id, 8u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(peer.destroy_qp(pqp), 0);
}

}  // namespace
}  // namespace softrdma::engine
