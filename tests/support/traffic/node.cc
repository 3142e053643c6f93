// Side set-up and tear-down: the device, memory, QPs, the out-of-band exchange
// (as ibv_rc_pingpong does it: QPN, PSN, GID; here also rkeys and addresses), and
// the QP state transitions RESET -> INIT -> RTR -> RTS (ibv_modify_qp(3): the
// attributes each transport needs at each step, IBA 11.2.4.2 / Table 95).
#include "traffic/node.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "traffic/content.h"

namespace softrdma::traffic {

namespace {

constexpr uint32_t kHelloMagic = 0x53525452;  // "SRTR"
constexpr uint32_t kRecvWindow = 64;          // RC: receive WQEs posted ahead per QP
constexpr uint8_t kRdAtomic = 4;  // below the deepest window: the engine's limit is exercised
constexpr int kSetupTimeoutMs = 30000;
constexpr uint32_t kQkey = 0x11111111;  // UD; bit 31 clear: not a controlled Q_Key
constexpr uint32_t kMarkersOutstanding = 8;  // send WQEs kept for markers
// Receive slots: as many as fit this many bytes, within [min, max].
constexpr uint64_t kSlotBytesPerQp = 32u << 20;
constexpr uint64_t kSharedSlotBytes = 64u << 20;
constexpr uint32_t kSlackBytes = 64;  // checked past each message (arrivals.cc)

ibv_mtu mtu_enum(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    default:
      return IBV_MTU_4096;
  }
}

ibv_qp_type qp_type(Transport t) {
  switch (t) {
    case Transport::kUc:
      return IBV_QPT_UC;
    case Transport::kUd:
      return IBV_QPT_UD;
    case Transport::kRc:
    case Transport::kSrq:
      return IBV_QPT_RC;
  }
  return IBV_QPT_RC;
}

void put_memory(Encoder& e, const RemoteMemory& m) { e.u64(m.addr).u32(m.rkey).u64(m.length); }

RemoteMemory get_memory(Decoder& d) {
  RemoteMemory m;
  m.addr = d.u64();
  m.rkey = d.u32();
  m.length = d.u64();
  return m;
}

RemoteMemory describe_region(const Region& r) { return {r.addr(), r.rkey(), r.size()}; }

std::string failed(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Side::Side(SideConfig config)
    : config_(std::move(config)), errors_(std::string(role_name(config_.role))) {}

Side::~Side() { teardown(); }

uint64_t Side::max_message() const {
  uint64_t m = 8;
  for (const PhaseSpec& p : config_.phases) m = std::max<uint64_t>(m, p.max_size);
  return m;
}

uint32_t Side::slot_bytes() const {
  const uint64_t header = config_.transport == Transport::kUd ? kGrhBytes : 0;
  return uint32_t((header + max_message() + kSlackBytes + 63) & ~uint64_t(63));
}

uint64_t Side::landing_poison_key(uint32_t qp) const {
  return make_key(config_.seed, 0x1a4d, uint64_t(config_.role), qp);
}

uint64_t Side::config_hash() const {
  uint64_t h = make_key(config_.seed, config_.qps, config_.mtu, config_.phases.size());
  h = make_key(h, uint64_t(config_.transport));
  for (const PhaseSpec& p : config_.phases) {
    h = make_key(h, p.min_size, p.max_size, p.messages);
    h = make_key(
        h, p.depth,
        uint64_t(p.both_directions) | uint64_t(p.variety) << 1 | uint64_t(p.force_max) << 2);
    for (uint32_t w : p.weight) h = make_key(h, w);
  }
  return h;
}

bool Side::open_oob(std::string& error) {
  int fd = config_.oob_fd;
  if (fd < 0 && config_.role == Role::kServer)
    fd = OobChannel::listen_and_accept(config_.oob_port, kSetupTimeoutMs * 4, error);
  else if (fd < 0)
    fd = OobChannel::connect_to(config_.oob_host, config_.oob_port, kSetupTimeoutMs, error);
  if (fd < 0) return false;
  oob_ = std::make_unique<OobChannel>(fd);
  return true;
}

bool Side::allocate_memory(std::string& error) {
  ibv_pd* pd = fabric_->pd();
  exposed_ = Region::allocate(pd, max_message() + (1 << 20), IBV_ACCESS_REMOTE_READ, error);
  if (exposed_)
    atomics_ = Region::allocate(pd, config_.qps * 8,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, error);
  if (!atomics_) return false;
  fill_content(exposed_key(config_.seed, config_.role), 0, {exposed_.data(), exposed_.size()});
  for (uint32_t q = 0; q < config_.qps; ++q) {
    const uint64_t v = atomic_initial(config_.seed, config_.role, q);
    std::memcpy(atomics_.data() + 8 * q, &v, 8);
  }
  if (config_.transport == Transport::kSrq) {
    shared_recv_ = Region::allocate(pd, uint64_t(recv_slots_) * slot_bytes(),
                                    IBV_ACCESS_LOCAL_WRITE, error);
    if (!shared_recv_) return false;
  }
  return true;
}

bool Side::create_qp(QpSlot& s, uint32_t q, std::string& error) {
  ibv_pd* pd = fabric_->pd();
  const uint64_t max = max_message();
  const bool slots = config_.transport != Transport::kRc;
  s.local = Region::allocate(pd, 2 * max + (1 << 20), IBV_ACCESS_LOCAL_WRITE, error);
  if (s.local)
    s.landing = Region::allocate(pd, std::max<uint64_t>(2 * max, 1 << 20),
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, error);
  if (s.landing && config_.transport != Transport::kSrq)
    s.recv = Region::allocate(pd, slots ? uint64_t(recv_slots_) * slot_bytes() : 2 * max + (1 << 20),
                              IBV_ACCESS_LOCAL_WRITE, error);
  if (!s.landing || (config_.transport != Transport::kSrq && !s.recv)) return false;
  if (config_.transport == Transport::kUc)  // so a lost packet's bytes are recognisable
    fill_content(landing_poison_key(q), 0, {s.landing.data(), s.landing.size()});
  uint32_t depth = 1;
  for (const PhaseSpec& p : config_.phases) depth = std::max(depth, p.depth);
  ibv_qp_init_attr init{};
  init.send_cq = fabric_->send_cq();
  init.recv_cq = fabric_->recv_cq();
  init.srq = fabric_->srq();
  init.qp_type = qp_type(config_.transport);
  init.cap = ibv_qp_cap{depth + kMarkersOutstanding, slots ? recv_slots_ : kRecvWindow, kMaxSges,
                        kMaxSges, kMaxInline};
  s.qp = ibv_create_qp(pd, &init);
  if (s.qp == nullptr) {
    error = failed("ibv_create_qp", errno);
    return false;
  }
  index_of_qpn_[s.qp->qp_num] = q;
  // QP 0 starts just below the 24-bit wrap, so PSN wrap-around happens in every run.
  s.psn =
      q == 0 ? 0xfffff0u : uint32_t(make_key(config_.seed, uint64_t(config_.role), q)) & 0xffffff;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (config_.transport == Transport::kUd) {
    a.qkey = kQkey;
    mask |= IBV_QP_QKEY;
  } else {
    a.qp_access_flags = config_.transport == Transport::kUc
                            ? IBV_ACCESS_REMOTE_WRITE
                            : IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  if (const int rc = ibv_modify_qp(s.qp, &a, mask); rc != 0) {
    error = failed("ibv_modify_qp RESET->INIT", rc);
    return false;
  }
  return true;
}

bool Side::create_qps(std::string& error) {
  qps_.resize(config_.qps);
  for (uint32_t q = 0; q < config_.qps; ++q)
    if (!create_qp(qps_[q], q, error)) return false;
  return true;
}

bool Side::setup(std::string& error) {
  const uint32_t max_depth = 64;
  const uint64_t slot = slot_bytes();
  if (config_.transport == Transport::kSrq)
    recv_slots_ = uint32_t(std::clamp<uint64_t>(kSharedSlotBytes / slot, 8, 256));
  else if (config_.transport != Transport::kRc)
    recv_slots_ = uint32_t(std::clamp<uint64_t>(kSlotBytesPerQp / slot, 4, 64));
  FabricOptions fo;
  fo.send_cqe = config_.qps * (max_depth + kMarkersOutstanding) + 16;
  fo.recv_cqe = config_.qps * std::max(kRecvWindow, recv_slots_) + 16;
  if (config_.transport == Transport::kSrq) {
    fo.srq_wr = recv_slots_;
    fo.srq_sge = kMaxSges;
  }
  fabric_ = Fabric::open(fo, error);
  if (!fabric_ || !open_oob(error) || !allocate_memory(error) || !create_qps(error) ||
      !exchange(error))
    return false;
  for (uint32_t q = 0; q < config_.qps; ++q)
    if (!connect_qp(qps_[q], q, error)) return false;
  if (!make_receivers(error)) return false;
  // Both sides in RTS with receive WQEs before traffic: a request to a QP still in
  // INIT is dropped.
  oob_->send(MsgType::kReady, Encoder{});
  std::optional<Frame> f = oob_->wait_frame(kSetupTimeoutMs);
  if (!f || f->type != MsgType::kReady) {
    error = "peer did not become ready: " + oob_->error();
    return false;
  }
  make_lanes();
  return true;
}

bool Side::exchange(std::string& error) {
  Encoder e;
  e.u32(kHelloMagic).u8(uint8_t(config_.role)).u64(config_hash());
  e.bytes(fabric_->gid());
  e.u32(recv_slots_);
  put_memory(e, describe_region(exposed_));
  put_memory(e, describe_region(atomics_));
  e.u32(config_.qps);
  for (const QpSlot& s : qps_) {
    e.u32(s.qp->qp_num).u32(s.psn);
    put_memory(e, describe_region(s.landing));
    ibv_ece offer{};
    if (ibv_query_ece(s.qp, &offer) != 0) offer = ibv_ece{};  // EOPNOTSUPP: none
    e.u32(offer.vendor_id).u32(offer.options);
  }
  oob_->send(MsgType::kHello, e);
  std::optional<Frame> f = oob_->wait_frame(kSetupTimeoutMs);
  if (!f || f->type != MsgType::kHello) {
    error = "no hello from the peer: " + oob_->error();
    return false;
  }
  Decoder d(f->payload);
  const uint32_t magic = d.u32();
  const Role role = Role(d.u8());
  peer_.config_hash = d.u64();
  d.bytes(peer_.gid);
  peer_.recv_slots = d.u32();
  peer_.exposed = get_memory(d);
  peer_.atomics = get_memory(d);
  const uint32_t n = d.u32();
  for (uint32_t q = 0; q < n && d.ok(); ++q) {
    peer_.qpn.push_back(d.u32());
    peer_.psn.push_back(d.u32());
    peer_.landing.push_back(get_memory(d));
    ibv_ece offer{};
    offer.vendor_id = d.u32();
    offer.options = d.u32();
    peer_.ece.push_back(offer);
  }
  if (!d.ok() || magic != kHelloMagic || role != peer_of(config_.role) || n != config_.qps) {
    error = "bad hello from the peer (wrong role or QP count?)";
    return false;
  }
  if (peer_.config_hash != config_hash()) {
    error = "the two processes were started with different traffic options";
    return false;
  }
  return true;
}

bool Side::connect_qp(QpSlot& s, uint32_t q, std::string& error) {
  const Transport t = config_.transport;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  int mask = IBV_QP_STATE;
  ibv_ah_attr& ah = a.ah_attr;
  ah.is_global = 1;  // RoCE addresses by GRH (IBA A17.4.5.1)
  std::memcpy(ah.grh.dgid.raw, peer_.gid.data(), 16);
  ah.grh.sgid_index = fabric_->gid_index();
  ah.grh.hop_limit = 64;
  ah.port_num = 1;
  // The peer's ECE offer; one this device does not understand is refused (EINVAL)
  // and the QP stays as IBA has it.
  if ((t == Transport::kRc || t == Transport::kSrq) && peer_.ece[q].vendor_id != 0) {
    ibv_ece offer = peer_.ece[q];
    ibv_set_ece(s.qp, &offer);
  }
  if (t != Transport::kUd) {
    a.path_mtu = mtu_enum(config_.mtu);
    a.dest_qp_num = peer_.qpn[q];
    a.rq_psn = peer_.psn[q];
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  }
  if (t == Transport::kRc || t == Transport::kSrq) {
    a.max_dest_rd_atomic = kRdAtomic;
    a.min_rnr_timer = config_.min_rnr_timer;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  if (const int rc = ibv_modify_qp(s.qp, &a, mask); rc != 0) {
    error = failed("ibv_modify_qp INIT->RTR (qp " + std::to_string(q) + ")", rc);
    return false;
  }
  if (t == Transport::kUd) {
    s.ah = ibv_create_ah(fabric_->pd(), &ah);
    if (s.ah == nullptr) {
      error = failed("ibv_create_ah", errno);
      return false;
    }
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = s.psn;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (t == Transport::kRc || t == Transport::kSrq) {
    a.timeout = config_.ack_timeout;
    a.retry_cnt = config_.retry_cnt;
    a.rnr_retry = 7;  // forever: receivers post as their buffers free up
    a.max_rd_atomic = kRdAtomic;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  if (const int rc = ibv_modify_qp(s.qp, &a, mask); rc != 0) {
    error = failed("ibv_modify_qp RTR->RTS (qp " + std::to_string(q) + ")", rc);
    return false;
  }
  return true;
}

bool Side::make_receivers(std::string& error) {
  const Transport t = config_.transport;
  if (t == Transport::kRc) {
    for (uint32_t q = 0; q < config_.qps; ++q) {
      QpSlot& s = qps_[q];
      s.receiver = std::make_unique<Receiver>(
          ReceiverSetup{s.qp, q, peer_.qpn[q], &s.recv, kRecvWindow, &errors_, &verified_,
                        config_.inject_data_errors && q == 0});
    }
    return true;
  }
  const uint64_t poison = make_key(config_.seed, 0x5107, uint64_t(config_.role));
  if (t == Transport::kSrq) {
    shared_pool_ = std::make_unique<SlotPool>(SlotPoolSetup{
        nullptr, fabric_->srq(), &shared_recv_, slot_bytes(), recv_slots_, poison, &errors_});
    if (!shared_pool_->post_all()) return false;
  }
  for (uint32_t q = 0; q < config_.qps; ++q) {
    QpSlot& s = qps_[q];
    if (t != Transport::kSrq) {
      s.pool = std::make_unique<SlotPool>(
          SlotPoolSetup{s.qp, nullptr, &s.recv, slot_bytes(), recv_slots_, poison, &errors_});
      if (!s.pool->post_all()) break;
    }
    ArrivalsSetup as;
    as.transport = t;
    as.qp_index = q;
    as.qp_num = s.qp->qp_num;
    as.peer_qpn = peer_.qpn[q];
    as.local_gid = fabric_->gid();
    as.peer_gid = peer_.gid;
    as.errors = &errors_;
    as.verified = &verified_;
    as.spoil_first_send = config_.inject_data_errors && q == 0;
    s.arrivals = std::make_unique<Arrivals>(as);
  }
  if (errors_.is_fatal()) error = "posting the receive slots failed";
  return !errors_.is_fatal();
}

void Side::make_lanes() {
  const Role peer = peer_of(config_.role);
  for (uint32_t q = 0; q < config_.qps; ++q) {
    QpSlot& s = qps_[q];
    LaneSetup ls;
    ls.qp = s.qp;
    ls.transport = config_.transport;
    ls.ah = s.ah;
    ls.remote_qpn = peer_.qpn[q];
    ls.remote_qkey = kQkey;
    // Half the peer's receive slots per round: a duplicated datagram (UD) or a
    // repeated marker takes a WQE too, and must not leave the next message none.
    ls.round_budget = peer_.recv_slots > 2 ? peer_.recv_slots / 2 - 1 : 1;
    ls.qp_index = q;
    ls.local = &s.local;
    ls.landing = peer_.landing[q];
    ls.exposed = peer_.exposed;
    ls.slot = RemoteMemory{peer_.atomics.addr + 8 * q, peer_.atomics.rkey, 8};
    ls.exposed_key = exposed_key(config_.seed, peer);
    ls.slot_initial = atomic_initial(config_.seed, peer, q);
    ls.errors = &errors_;
    ls.verified = &verified_;
    ls.spoil_first_read = config_.inject_data_errors && q == 0;
    s.lane = std::make_unique<Lane>(ls);
  }
}

void Side::teardown() {
  for (QpSlot& s : qps_) {
    s.lane.reset();
    s.receiver.reset();
    s.arrivals.reset();
    s.pool.reset();
    if (s.qp != nullptr) ibv_destroy_qp(s.qp);
    if (s.ah != nullptr) ibv_destroy_ah(s.ah);
    s.qp = nullptr;
    s.ah = nullptr;
  }
  qps_.clear();  // deregisters before unmapping, before the PD goes
  shared_pool_.reset();
  shared_recv_ = Region{};
  exposed_ = Region{};
  atomics_ = Region{};
  oob_.reset();
  fabric_.reset();
}

}  // namespace softrdma::traffic
