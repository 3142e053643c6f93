// ibv_modify_qp: the QP state machine of IBA 10.3 / 11.2.5.2 and, per transition
// and transport, which attributes must and may be given (the table of
// ibv_modify_qp(3)). Anything else is EINVAL and changes nothing.
#include <algorithm>
#include <array>
#include <cerrno>

#include "engine/device.h"
#include "engine/qp.h"
#include "wire/psn.h"

namespace softrdma::engine {

namespace {

constexpr int kState = IBV_QP_STATE, kCur = IBV_QP_CUR_STATE, kAccess = IBV_QP_ACCESS_FLAGS,
              kPkey = IBV_QP_PKEY_INDEX, kPort = IBV_QP_PORT, kQkey = IBV_QP_QKEY,
              kAv = IBV_QP_AV, kMtu = IBV_QP_PATH_MTU, kTimeout = IBV_QP_TIMEOUT,
              kRetry = IBV_QP_RETRY_CNT, kRnrRetry = IBV_QP_RNR_RETRY,
              kRqPsn = IBV_QP_RQ_PSN, kRdAtomic = IBV_QP_MAX_QP_RD_ATOMIC,
              kAltPath = IBV_QP_ALT_PATH, kMinRnr = IBV_QP_MIN_RNR_TIMER,
              kSqPsn = IBV_QP_SQ_PSN, kDestRdAtomic = IBV_QP_MAX_DEST_RD_ATOMIC,
              kMig = IBV_QP_PATH_MIG_STATE, kDestQpn = IBV_QP_DEST_QPN,
              kSqdNotify = IBV_QP_EN_SQD_ASYNC_NOTIFY;

// The columns of IBA 10.3 / 11.2.5.2's attribute tables; XRC's two halves (IBA
// A14) follow the RC rows, each with the attributes of its own direction only.
enum Transport { kRc, kUc, kUd, kXrcSend, kXrcRecv, kTransports };
using PerTransport = std::array<int, kTransports>;

struct Rule {
  bool valid = false;
  PerTransport required{};
  PerTransport optional{};
};

using Table = std::array<std::array<Rule, IBV_QPS_ERR + 1>, IBV_QPS_ERR + 1>;

constexpr Rule rule(PerTransport required, PerTransport optional) {
  return Rule{true, required, optional};
}

constexpr Table make_table() {
  Table t{};
  for (int from = IBV_QPS_RESET; from <= IBV_QPS_ERR; ++from) {
    t[from][IBV_QPS_RESET] = rule({}, {});  // any state -> Reset or Error
    t[from][IBV_QPS_ERR] = rule({}, {});
  }
  constexpr int kConnected = kPkey | kPort | kAccess;
  t[IBV_QPS_RESET][IBV_QPS_INIT] =
      rule({kConnected, kConnected, kPkey | kPort | kQkey, kConnected, kConnected}, {});
  t[IBV_QPS_INIT][IBV_QPS_INIT] =
      rule({}, {kConnected, kConnected, kPkey | kPort | kQkey, kConnected, kConnected});
  constexpr int kPath = kAv | kMtu | kDestQpn | kRqPsn;
  // The XRC send half accepts (and ignores) the responder attributes, which
  // rdma-core's tests set on both halves alike.
  t[IBV_QPS_INIT][IBV_QPS_RTR] =
      rule({kPath | kDestRdAtomic | kMinRnr, kPath, 0, kPath, kPath | kDestRdAtomic | kMinRnr},
           {kAltPath | kAccess | kPkey, kAltPath | kAccess | kPkey, kPkey | kQkey,
            kAltPath | kAccess | kPkey | kDestRdAtomic | kMinRnr, kAltPath | kAccess | kPkey});
  constexpr int kRequester = kSqPsn | kTimeout | kRetry | kRnrRetry | kRdAtomic;
  constexpr int kInRts = kCur | kAltPath | kAccess | kMinRnr | kMig;
  t[IBV_QPS_RTR][IBV_QPS_RTS] =
      rule({kRequester, kSqPsn, kSqPsn, kRequester, kSqPsn | kTimeout},
           {kInRts, kCur | kAltPath | kAccess | kMig, kCur | kQkey, kInRts,
            kInRts | kRetry | kRnrRetry | kRdAtomic});
  const PerTransport in_rts = {kInRts, kCur | kAccess | kAltPath | kMig, kCur | kQkey, kInRts,
                               kInRts};
  t[IBV_QPS_RTS][IBV_QPS_RTS] = rule({}, in_rts);
  t[IBV_QPS_SQD][IBV_QPS_RTS] = rule({}, in_rts);
  t[IBV_QPS_RTS][IBV_QPS_SQD] =
      rule({}, {kSqdNotify, kSqdNotify, kSqdNotify, kSqdNotify, kSqdNotify});
  constexpr int kInSqd = kPort | kAv | kTimeout | kRetry | kRnrRetry | kRdAtomic |
                         kDestRdAtomic | kAltPath | kAccess | kPkey | kMinRnr | kMig;
  t[IBV_QPS_SQD][IBV_QPS_SQD] = rule(
      {}, {kInSqd, kAv | kAltPath | kAccess | kPkey | kMig, kPkey | kQkey, kInSqd, kInSqd});
  // IBA 10.3.1: SQE exists only for UC and UD.
  t[IBV_QPS_SQE][IBV_QPS_RTS] = rule({}, {0, kCur | kAccess, kCur | kQkey, 0, 0});
  return t;
}

constexpr Table kTransitions = make_table();

Transport transport_of(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_UD: return kUd;
    case IBV_QPT_UC: return kUc;
    case IBV_QPT_XRC_SEND: return kXrcSend;
    case IBV_QPT_XRC_RECV: return kXrcRecv;
    default: return kRc;
  }
}

bool valid_state(int s) { return s >= IBV_QPS_RESET && s <= IBV_QPS_ERR; }

}  // namespace

int Qp::check_attr(const ibv_qp_attr& a, int mask) const {
  const DeviceLimits& lim = device_.limits();
  if ((mask & kCur) && a.cur_qp_state != attr_.qp_state) return EINVAL;
  if ((mask & kPort) && a.port_num != 1) return EINVAL;
  if ((mask & kPkey) && a.pkey_index != 0) return EINVAL;  // one-entry P_Key table
  if ((mask & kMtu) && (raw_enum(a.path_mtu) < IBV_MTU_256 || raw_enum(a.path_mtu) > IBV_MTU_4096))
    return EINVAL;
  if ((mask & kAv)) {
    // RoCE: the GRH is mandatory (IBA A17.4.5); the source GID must exist.
    if (!a.ah_attr.is_global || a.ah_attr.grh.sgid_index >= device_.gids().size())
      return EINVAL;
    if (a.ah_attr.port_num > 1) return EINVAL;
  }
  if ((mask & kDestRdAtomic) && a.max_dest_rd_atomic > lim.max_qp_rd_atom) return EINVAL;
  if ((mask & kRdAtomic) && a.max_rd_atomic > lim.max_qp_init_rd_atom) return EINVAL;
  if ((mask & kTimeout) && a.timeout > 31) return EINVAL;
  if ((mask & kRetry) && a.retry_cnt > 7) return EINVAL;
  if ((mask & kRnrRetry) && a.rnr_retry > 7) return EINVAL;
  if ((mask & kMinRnr) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & kDestQpn) && a.dest_qp_num > wire::kPsnMask) return EINVAL;
  // IBV_ACCESS_ON_DEMAND says nothing about a QP, but programs written for ODP pass
  // their MRs' flags here (pyverbs' test_odp does); the kernel and its providers
  // ignore it, and so does softrdma (the QP keeps only the remote rights it reads).
  constexpr unsigned kRemoteRights =
      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
  if ((mask & kAccess) && (a.qp_access_flags & ~kRemoteRights)) return EINVAL;
  return 0;
}

void Qp::apply_attr(const ibv_qp_attr& a, int mask) {
  if (mask & kAccess) attr_.qp_access_flags = a.qp_access_flags;
  if (mask & kPkey) attr_.pkey_index = a.pkey_index;
  if (mask & kPort) attr_.port_num = a.port_num;
  if (mask & kQkey) attr_.qkey = a.qkey;
  if (mask & kAv) attr_.ah_attr = a.ah_attr;
  if (mask & kMtu) attr_.path_mtu = a.path_mtu;
  if (mask & kTimeout) attr_.timeout = a.timeout;
  if (mask & kRetry) attr_.retry_cnt = a.retry_cnt;
  if (mask & kRnrRetry) attr_.rnr_retry = a.rnr_retry;
  if (mask & kRqPsn) attr_.rq_psn = a.rq_psn & wire::kPsnMask;
  if (mask & kSqPsn) attr_.sq_psn = a.sq_psn & wire::kPsnMask;
  if (mask & kRdAtomic) attr_.max_rd_atomic = a.max_rd_atomic;
  if (mask & kDestRdAtomic) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & kMinRnr) attr_.min_rnr_timer = a.min_rnr_timer;
  if (mask & kDestQpn) attr_.dest_qp_num = a.dest_qp_num;
  if (mask & kAltPath) attr_.alt_ah_attr = a.alt_ah_attr;
  if (mask & kMig) attr_.path_mig_state = a.path_mig_state;
  if (mask & kSqdNotify) report_sq_drained_ = a.en_sqd_async_notify != 0;
}

// Cold path: waits for the engine (the protocol changes with the state), then
// takes the post lock while the attributes and the state change (posters read the
// state under it). The protocol reacts after the post lock is released: a role may
// itself enter Error, which takes it again.
int Qp::modify(const ibv_qp_attr& a, int mask) {
  auto engine = device_.hold_engine();
  ibv_qp_state from;
  ibv_qp_state to;
  {
    std::lock_guard lock(mutex_);
    from = attr_.qp_state;
    if (int err = check_modify(a, mask, from); err != 0) return err;
    to = ibv_qp_state(mask & kState ? raw_enum(a.qp_state) : int(from));
    apply_attr(a, mask);
    set_state(to);
    // IBA 10.3.1: Reset empties the work queues without completions. The QP's
    // completions still in its CQs go too (mlx4/mlx5 providers clean their CQs on
    // Reset; pyverbs' tests that restate a QP after an error rely on it).
    if (to == IBV_QPS_RESET) {
      reset_queues();
      send_cq_->remove_qp(qpn_);
      if (recv_cq_ != send_cq_) recv_cq_->remove_qp(qpn_);
    }
  }
  after_state_change(from, to, device_.clock().now());
  device_.family().flush();
  return 0;
}

int Qp::check_modify(const ibv_qp_attr& a, int mask, ibv_qp_state from) const {
  // A C caller may pass any int as the state: range-check it before it is an enum.
  const int wanted = (mask & kState) ? raw_enum(a.qp_state) : int(from);
  if (!valid_state(wanted)) return EINVAL;
  const Rule& r = kTransitions[from][wanted];
  if (!r.valid) return EINVAL;
  const Transport t = transport_of(type_);
  if (from == IBV_QPS_SQE && t == kRc) return EINVAL;  // IBA 10.3.1: RC has no SQE
  // An RNIC's QP: only the connection manager moves it into RTS, with its
  // connection (Qp::enter_rts_connected); as siw answers a modify to RTS without a socket.
  if (wanted == IBV_QPS_RTS && from != IBV_QPS_RTS && from != IBV_QPS_SQD &&
      family_traits_->connection_managed_qps)
    return EINVAL;
  const int given = mask & ~kState;
  if ((given & r.required[t]) != r.required[t]) return EINVAL;
  if (given & ~(r.required[t] | r.optional[t])) return EINVAL;
  return check_attr(a, mask);
}

// Engine held, mutex_ not held; the state is `to` already.
void Qp::after_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now) {
  if (to == IBV_QPS_ERR) {
    if (from != IBV_QPS_ERR) flush_and_notify(from, now);
    return;
  }
  protocol_->on_state_change(from, to, now);
  // The protocol chose its path (the wire or the same host) just now: the status
  // row written by set_state still shows the old one.
  if (to == IBV_QPS_RTR || to == IBV_QPS_SQD) device_.note_qp(*this);
  if (to == IBV_QPS_SQD) maybe_report_drained();
}

void Qp::enter_rts_connected(uint16_t ird, uint16_t ord, Nanos now) {
  const ibv_qp_state from = attr_.qp_state;
  closed_by_peer_.store(false, std::memory_order_relaxed);  // a new connection
  {
    std::lock_guard lock(mutex_);
    attr_.max_dest_rd_atomic = uint8_t(std::min<uint16_t>(ird, 255));
    attr_.max_rd_atomic = uint8_t(std::min<uint16_t>(ord, 255));
    set_state(IBV_QPS_RTS);
  }
  after_state_change(from, IBV_QPS_RTS, now);
  protocol_->on_send_posted(now);
}

// IBA 11.2.5.3: SQ Drained is reported once nothing sent is still outstanding.
void Qp::maybe_report_drained() {
  if (attr_.qp_state != IBV_QPS_SQD || !report_sq_drained_) return;
  if (!sq_.empty() && sq_.front().state != SendState::kQueued) return;
  report_sq_drained_ = false;
  device_.post_async_event(AsyncEvent{IBV_EVENT_SQ_DRAINED, qpn_, nullptr});
}

int Qp::query(ibv_qp_attr& a, int /*mask*/, ibv_qp_init_attr& init) const {
  std::lock_guard lock(mutex_);
  a = attr_;
  a.cap = cap_;
  a.sq_draining = 0;
  init = ibv_qp_init_attr{};
  init.qp_type = type_;
  init.cap = cap_;
  init.sq_sig_all = sq_sig_all_;
  return 0;
}

}  // namespace softrdma::engine
