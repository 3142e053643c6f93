// Node set-up and tear-down: the fabric, memory, QPs, the out-of-band exchange
// (as ibv_rc_pingpong does it: QPN, PSN, GID; here also rkeys and addresses), and
// the QP state transitions RESET -> INIT -> RTR -> RTS.
#include "traffic/node.h"

#include <cstdio>
#include <cstring>
#include <ctime>

#include "engine/qp.h"
#include "traffic/content.h"

namespace softrdma::traffic {

namespace {

constexpr uint32_t kHelloMagic = 0x53525452;  // "SRTR"
constexpr uint32_t kRecvWindow = 64;          // receive WQEs posted ahead per QP
constexpr uint8_t kRdAtomic = 4;  // below the deepest window: the engine's limit is exercised
constexpr int kSetupTimeoutMs = 30000;

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

void put_memory(Encoder& e, const RemoteMemory& m) { e.u64(m.addr).u32(m.rkey).u64(m.length); }

RemoteMemory get_memory(Decoder& d) {
  RemoteMemory m;
  m.addr = d.u64();
  m.rkey = d.u32();
  m.length = d.u64();
  return m;
}

RemoteMemory describe_region(const Region& r) { return {r.addr(), r.key(), r.size()}; }

}  // namespace

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Node::Node(NodeConfig config)
    : config_(std::move(config)), errors_(std::string(role_name(config_.role))) {}

Node::~Node() { teardown(); }

uint64_t Node::max_message() const {
  uint64_t m = 8;
  for (const PhaseSpec& p : config_.phases) m = std::max<uint64_t>(m, p.max_size);
  return m;
}

uint64_t Node::config_hash() const {
  uint64_t h = make_key(config_.seed, config_.qps, config_.mtu, config_.phases.size());
  for (const PhaseSpec& p : config_.phases) {
    h = make_key(h, p.min_size, p.max_size, p.messages);
    h = make_key(
        h, p.depth,
        uint64_t(p.both_directions) | uint64_t(p.variety) << 1 | uint64_t(p.force_max) << 2);
    for (uint32_t w : p.weight) h = make_key(h, w);
  }
  return h;
}

bool Node::open_oob(std::string& error) {
  int fd = config_.oob_fd;
  if (fd < 0 && config_.role == Role::kServer)
    fd = OobChannel::listen_and_accept(config_.oob_port, kSetupTimeoutMs * 4, error);
  else if (fd < 0)
    fd = OobChannel::connect_to(config_.oob_host, config_.oob_port, kSetupTimeoutMs, error);
  if (fd < 0) return false;
  oob_ = std::make_unique<OobChannel>(fd);
  return true;
}

bool Node::create_qps(std::string& error) {
  engine::Device& dev = fabric_->device();
  const uint64_t max = max_message();
  uint32_t depth = 1;
  for (const PhaseSpec& p : config_.phases) depth = std::max(depth, p.depth);
  qps_.resize(config_.qps);
  for (uint32_t q = 0; q < config_.qps; ++q) {
    QpSlot& s = qps_[q];
    s.local =
        Region::allocate(dev, fabric_->pd(), 2 * max + (1 << 20), IBV_ACCESS_LOCAL_WRITE, error);
    if (s.local)
      s.landing = Region::allocate(dev, fabric_->pd(), std::max<uint64_t>(2 * max, 1 << 20),
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, error);
    if (s.landing)
      s.recv =
          Region::allocate(dev, fabric_->pd(), 2 * max + (1 << 20), IBV_ACCESS_LOCAL_WRITE, error);
    if (!s.recv) return false;
    engine::QpInit init;
    init.send_cq = &fabric_->send_cq();
    init.recv_cq = &fabric_->recv_cq();
    init.cap = ibv_qp_cap{depth, kRecvWindow, kMaxSges, kMaxSges, kMaxInline};
    int err = 0;
    s.qp = dev.create_qp(fabric_->pd(), init, err);
    if (s.qp == nullptr) {
      error = std::string("create_qp: ") + std::strerror(err);
      return false;
    }
    index_of_qpn_[s.qp->qpn()] = q;
    // QP 0 starts just below the 24-bit wrap, so PSN wrap-around happens in every run.
    s.psn =
        q == 0 ? 0xfffff0u : uint32_t(make_key(config_.seed, uint64_t(config_.role), q)) & 0xffffff;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (int rc =
            s.qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
      error = std::string("modify_qp RESET->INIT: ") + std::strerror(rc);
      return false;
    }
  }
  return true;
}

bool Node::setup(std::string& error) {
  const uint32_t max_depth = 64;
  FabricOptions fo;
  fo.faults = config_.faults;
  fo.pcap = config_.pcap;
  fo.send_cqe = config_.qps * max_depth + 16;
  fo.recv_cqe = config_.qps * kRecvWindow + 16;
  fabric_ = Fabric::open(fo, error);
  if (!fabric_ || !open_oob(error)) return false;
  engine::Device& dev = fabric_->device();
  exposed_ = Region::allocate(dev, fabric_->pd(), max_message() + (1 << 20), IBV_ACCESS_REMOTE_READ,
                              error);
  if (exposed_)
    atomics_ = Region::allocate(dev, fabric_->pd(), config_.qps * 8,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, error);
  if (!atomics_) return false;
  fill_content(exposed_key(config_.seed, config_.role), 0, {exposed_.data(), exposed_.size()});
  for (uint32_t q = 0; q < config_.qps; ++q) {
    const uint64_t v = atomic_initial(config_.seed, config_.role, q);
    std::memcpy(atomics_.data() + 8 * q, &v, 8);
  }
  if (!create_qps(error) || !exchange(error)) return false;
  for (uint32_t q = 0; q < config_.qps; ++q)
    if (!connect_qp(qps_[q], q, error)) return false;
  // Both sides in RTS before traffic: a request to a QP still in INIT is dropped.
  oob_->send(MsgType::kReady, Encoder{});
  std::optional<Frame> f = oob_->wait_frame(kSetupTimeoutMs);
  if (!f || f->type != MsgType::kReady) {
    error = "peer did not become ready: " + oob_->error();
    return false;
  }
  make_lanes();
  return true;
}

bool Node::exchange(std::string& error) {
  Encoder e;
  e.u32(kHelloMagic).u8(uint8_t(config_.role)).u64(config_hash());
  const transport::Gid gid = fabric_->gid();
  e.bytes(gid);
  put_memory(e, describe_region(exposed_));
  put_memory(e, describe_region(atomics_));
  e.u32(config_.qps);
  for (const QpSlot& s : qps_) {
    e.u32(s.qp->qpn()).u32(s.psn);
    put_memory(e, describe_region(s.landing));
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
  peer_.exposed = get_memory(d);
  peer_.atomics = get_memory(d);
  const uint32_t n = d.u32();
  for (uint32_t q = 0; q < n && d.ok(); ++q) {
    peer_.qpn.push_back(d.u32());
    peer_.psn.push_back(d.u32());
    peer_.landing.push_back(get_memory(d));
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

bool Node::connect_qp(QpSlot& s, uint32_t q, std::string& error) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu_enum(config_.mtu);
  a.dest_qp_num = peer_.qpn[q];
  a.rq_psn = peer_.psn[q];
  a.max_dest_rd_atomic = kRdAtomic;
  a.min_rnr_timer = config_.min_rnr_timer;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer_.gid.data(), 16);
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  int rc = s.qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) {
    error = "modify_qp INIT->RTR (qp " + std::to_string(q) + "): " + std::strerror(rc);
    return false;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = s.psn;
  a.timeout = config_.ack_timeout;
  a.retry_cnt = config_.retry_cnt;
  a.rnr_retry = 7;  // forever: receivers post as their buffers free up
  a.max_rd_atomic = kRdAtomic;
  rc = s.qp->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) {
    error = "modify_qp RTR->RTS (qp " + std::to_string(q) + "): " + std::strerror(rc);
    return false;
  }
  return true;
}

void Node::make_lanes() {
  const Role peer = peer_of(config_.role);
  for (uint32_t q = 0; q < config_.qps; ++q) {
    QpSlot& s = qps_[q];
    LaneSetup ls;
    ls.qp = s.qp;
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
    s.receiver = std::make_unique<Receiver>(ReceiverSetup{s.qp, q, peer_.qpn[q], &s.recv,
                                                          kRecvWindow, &errors_, &verified_,
                                                          config_.inject_data_errors && q == 0});
  }
}

void Node::teardown() {
  if (fabric_) {
    for (QpSlot& s : qps_) {
      s.lane.reset();
      s.receiver.reset();
      if (s.qp != nullptr) fabric_->device().destroy_qp(s.qp);
      s.qp = nullptr;
    }
  }
  qps_.clear();  // deregisters (revokes) before unmapping
  exposed_ = Region{};
  atomics_ = Region{};
  oob_.reset();
  fabric_.reset();
}

}  // namespace softrdma::traffic
