#include "engine/roce/family.h"
#include "engine/rc_role_fixture.h"

#include <cstring>

#include "wire/ack_hold.h"
#include "wire/fields.h"
#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::testing {

using transport::fake::FakePacket;
namespace op = wire::op;

PeerPacket::PeerPacket(uint8_t opcode, uint32_t dest_qp, uint32_t psn, size_t payload_len)
    : bytes_(wire::packet_bytes(opcode, payload_len)) {
  wire::PacketView v = wire::build_packet(bytes_, opcode, payload_len);
  v.set(wire::bth::kPkey, 0xffff);
  v.set(wire::bth::kDestQp, dest_qp);
  v.set(wire::bth::kPsn, psn);
}

void RcRoleTest::TearDown() {
  device_.reset();  // before the transport it uses
  transport_.reset();
}

void RcRoleTest::open(const RoleOptions& options) {
  TearDown();
  options_ = options;
  transport_ = net_.attach(qp_gid_);
  DeviceConfig config;
  config.line_rate_bytes_per_ns = options.line_rate_bytes_per_ns;
  config.delay_control = options.delay_control;
  config.target_queueing_ns = options.target_queueing;
  config.initial_window = options.initial_window;
  if (options.selective) config.selective_repeat = SelectiveRepeatMode::kAlways;
  device_ = std::make_unique<Device>(config, *transport_, roce::RoceFamily::maker(), clock_);
  int err = 0;
  pd_ = device_->alloc_pd(err);
  scq_ = device_->create_cq(256, err);
  rcq_ = device_->create_cq(256, err);
  QpInit init;
  init.type = IBV_QPT_RC;
  init.send_cq = scq_;
  init.recv_cq = rcq_;
  init.cap = ibv_qp_cap{64, 64, 1, 1, 0};
  qp_ = device_->create_qp(pd_, init, err);
  ASSERT_NE(qp_, nullptr) << err;
  mem_.assign(kMemory, 0);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
  mr_ = device_->reg_mr(pd_, mem_.data(), mem_.size(), addr(0), access, err);
  ASSERT_NE(mr_, nullptr) << err;

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = access & ~IBV_ACCESS_LOCAL_WRITE;
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS), 0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = options.mtu;
  attr.dest_qp_num = kPeerQpn;
  attr.rq_psn = options.rq_psn;
  attr.max_dest_rd_atomic = 16;
  attr.min_rnr_timer = options.min_rnr_timer;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.grh.sgid_index = 1;
  std::memcpy(attr.ah_attr.grh.dgid.raw, peer_gid_.data(), 16);
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER), 0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = options.sq_psn;
  attr.timeout = options.timeout;
  attr.retry_cnt = options.retry_cnt;
  attr.rnr_retry = options.rnr_retry;
  attr.max_rd_atomic = 16;
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_MAX_QP_RD_ATOMIC), 0);
  net_.take_sent();
}

std::vector<FakePacket> RcRoleTest::run() {
  for (int i = 0; i < 10000; ++i) {
    if (!device_->progress() && transport_->queued() == 0) break;
  }
  std::vector<FakePacket> from_qp;
  for (FakePacket& p : net_.take_sent())
    if (p.src == qp_gid_) from_qp.push_back(std::move(p));
  return from_qp;
}

std::vector<FakePacket> RcRoleTest::deliver(PeerPacket packet, bool marked, Nanos waited) {
  net_.inject(peer_gid_, qp_gid_, packet.take(), 0xC000, marked,
              waited != 0 ? clock_.now() - waited : 0);
  return run();
}

std::vector<FakePacket> RcRoleTest::advance(Nanos ns, Nanos step) {
  std::vector<FakePacket> sent = run();
  for (Nanos left = ns; left > 0; left -= step) {
    clock_.advance(std::min(left, step));
    for (FakePacket& p : run()) sent.push_back(std::move(p));
  }
  return sent;
}

PeerPacket RcRoleTest::send_only(uint32_t psn, size_t length, bool ack_req) {
  PeerPacket p(op::kRcSendOnly, qp_->qpn(), psn, length);
  p.view().set(wire::bth::kAckReq, ack_req ? 1 : 0);
  std::memset(p.view().payload().data(), 0x5a, length);
  return p;
}

PeerPacket RcRoleTest::read_request(uint32_t psn, size_t offset, uint32_t length) {
  PeerPacket p(op::kRcReadRequest, qp_->qpn(), psn, 0);
  p.view().set(wire::bth::kAckReq, 1);
  p.view().set(wire::reth::kVa, addr(offset));
  p.view().set(wire::reth::kRkey, mr_->key);
  p.view().set(wire::reth::kDmaLength, length);
  return p;
}

PeerPacket RcRoleTest::fetch_add(uint32_t psn, size_t offset, uint64_t add) {
  PeerPacket p(op::kRcFetchAdd, qp_->qpn(), psn, 0);
  p.view().set(wire::bth::kAckReq, 1);
  p.view().set(wire::atomic_eth::kVa, addr(offset));
  p.view().set(wire::atomic_eth::kRkey, mr_->key);
  p.view().set(wire::atomic_eth::kSwapAdd, add);
  return p;
}

PeerPacket RcRoleTest::ack(uint32_t psn) {
  PeerPacket p(op::kRcAcknowledge, qp_->qpn(), psn, 0);
  p.view().set(wire::aeth::kSyndrome, wire::syndrome::ack());
  return p;
}

PeerPacket RcRoleTest::sack(uint32_t psn, std::initializer_list<uint32_t> held, Nanos hold_ns) {
  // kAlways takes the wide SACK and the hold too (RcConnection::agreed_wide_sack,
  // agreed_ack_hold).
  PeerPacket p(op::kRcSack, qp_->qpn(), psn, wire::kWideSackBitmapBytes + wire::kAckHoldBytes);
  p.view().set(wire::aeth::kSyndrome, wire::syndrome::ack());
  const uint32_t first_missing = wire::psn_add(psn, 1);
  const std::span<uint8_t> bitmap = p.view().payload().first(wire::kWideSackBitmapBytes);
  for (const uint32_t h : held)
    wire::sack_mark(bitmap, uint32_t(wire::psn_diff(h, first_missing) - 1));
  wire::write_ack_hold(p.view().payload().subspan(wire::kWideSackBitmapBytes).first<4>(), hold_ns);
  return p;
}

PeerPacket RcRoleTest::timed_ack(uint32_t psn, Nanos hold_ns) {
  PeerPacket p(op::kRcTimedAck, qp_->qpn(), psn, wire::kAckHoldBytes);
  p.view().set(wire::aeth::kSyndrome, wire::syndrome::ack());
  wire::write_ack_hold(p.view().payload().first<wire::kAckHoldBytes>(), hold_ns);
  return p;
}

PeerPacket RcRoleTest::nak(uint32_t psn, uint8_t code) {
  PeerPacket p = ack(psn);
  p.view().set(wire::aeth::kSyndrome, wire::syndrome::nak(code));
  return p;
}

PeerPacket RcRoleTest::rnr_nak(uint32_t psn, uint8_t timer_code) {
  PeerPacket p = ack(psn);
  p.view().set(wire::aeth::kSyndrome, wire::syndrome::rnr_nak(timer_code));
  return p;
}

void RcRoleTest::post_recv(size_t offset, uint32_t length, uint64_t wr_id) {
  ibv_sge sge{addr(offset), length, mr_->key};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(qp_->post_recv(&wr, &bad), 0);
}

int RcRoleTest::post_send(size_t offset, uint32_t length, uint64_t wr_id) {
  ibv_sge sge{addr(offset), length, mr_->key};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_send_wr* bad = nullptr;
  return qp_->post_send(&wr, &bad);
}

std::vector<ibv_wc> RcRoleTest::poll(Cq* cq) {
  std::vector<ibv_wc> wcs(64);
  wcs.resize(size_t(cq->poll(int(wcs.size()), wcs.data())));
  return wcs;
}

uint64_t RcRoleTest::load64(size_t offset) const {
  uint64_t v;
  std::memcpy(&v, mem_.data() + offset, 8);
  return v;
}

void RcRoleTest::store64(size_t offset, uint64_t value) {
  std::memcpy(mem_.data() + offset, &value, 8);
}

uint32_t RcRoleTest::msn_of(const FakePacket& p) const {
  return uint32_t(p.view().get(wire::aeth::kMsn));
}

uint8_t RcRoleTest::syndrome_of(const FakePacket& p) const {
  return uint8_t(p.view().get(wire::aeth::kSyndrome));
}

}  // namespace softrdma::engine::testing
