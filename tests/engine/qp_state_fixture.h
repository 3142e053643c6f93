// The QP state machine fixture shared by qp_state_test.cc and qp_post_test.cc:
// the transition table of ibv_modify_qp(3) as data, and a device with one RC QP.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "engine/rc_fixture.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine::qp_testing {

namespace fake = transport::fake;

// ---------------------------------------------------------------------------------
// The expectation: RC transitions with their required and optional attributes.
// ---------------------------------------------------------------------------------

inline constexpr int kCur = IBV_QP_CUR_STATE, kAccess = IBV_QP_ACCESS_FLAGS,
              kPkey = IBV_QP_PKEY_INDEX, kPort = IBV_QP_PORT, kAv = IBV_QP_AV,
              kMtu = IBV_QP_PATH_MTU, kTimeout = IBV_QP_TIMEOUT, kRetry = IBV_QP_RETRY_CNT,
              kRnrRetry = IBV_QP_RNR_RETRY, kRqPsn = IBV_QP_RQ_PSN,
              kRdAtomic = IBV_QP_MAX_QP_RD_ATOMIC, kAltPath = IBV_QP_ALT_PATH,
              kMinRnr = IBV_QP_MIN_RNR_TIMER, kSqPsn = IBV_QP_SQ_PSN,
              kDestRdAtomic = IBV_QP_MAX_DEST_RD_ATOMIC, kMig = IBV_QP_PATH_MIG_STATE,
              kDestQpn = IBV_QP_DEST_QPN, kSqdNotify = IBV_QP_EN_SQD_ASYNC_NOTIFY;

// Every attribute bit a caller can give besides IBV_QP_STATE.
inline constexpr int kAllAttributeBits[] = {
    IBV_QP_CUR_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX,
    IBV_QP_PORT,      IBV_QP_QKEY,                IBV_QP_AV,           IBV_QP_PATH_MTU,
    IBV_QP_TIMEOUT,   IBV_QP_RETRY_CNT,           IBV_QP_RNR_RETRY,    IBV_QP_RQ_PSN,
    IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_ALT_PATH,     IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN,
    IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_PATH_MIG_STATE, IBV_QP_CAP,  IBV_QP_DEST_QPN,
    IBV_QP_RATE_LIMIT};

inline constexpr int kInitRequired = kPkey | kPort | kAccess;
inline constexpr int kRtrRequired = kAv | kMtu | kDestQpn | kRqPsn | kDestRdAtomic | kMinRnr;
inline constexpr int kRtsRequired = kSqPsn | kTimeout | kRetry | kRnrRetry | kRdAtomic;

struct Transition {
  ibv_qp_state from;
  ibv_qp_state to;
  int required;
  int optional;
};

inline std::string name_of(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "state" + std::to_string(int(s));
  }
}

inline std::string name_of(const Transition& t) { return name_of(t.from) + "->" + name_of(t.to); }

// The states an RC QP can be put in by modify_qp (SQE exists only for UC/UD).
inline constexpr ibv_qp_state kReachable[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                                       IBV_QPS_RTS,   IBV_QPS_SQD,  IBV_QPS_ERR};
inline constexpr ibv_qp_state kAllStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                       IBV_QPS_SQD,   IBV_QPS_SQE,  IBV_QPS_ERR};

inline std::vector<Transition> rc_transitions() {
  std::vector<Transition> t = {
      {IBV_QPS_RESET, IBV_QPS_INIT, kInitRequired, 0},
      {IBV_QPS_INIT, IBV_QPS_INIT, 0, kPkey | kPort | kAccess},
      {IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired, kAltPath | kAccess | kPkey},
      {IBV_QPS_RTR, IBV_QPS_RTS, kRtsRequired, kCur | kAltPath | kAccess | kMinRnr | kMig},
      {IBV_QPS_RTS, IBV_QPS_RTS, 0, kCur | kAccess | kAltPath | kMig | kMinRnr},
      {IBV_QPS_RTS, IBV_QPS_SQD, 0, kSqdNotify},
      {IBV_QPS_SQD, IBV_QPS_RTS, 0, kCur | kAltPath | kAccess | kMinRnr | kMig},
      {IBV_QPS_SQD, IBV_QPS_SQD, 0,
       kPort | kAv | kTimeout | kRetry | kRnrRetry | kRdAtomic | kDestRdAtomic | kAltPath |
           kAccess | kPkey | kMinRnr | kMig},
  };
  // IBA 10.3.1 (figure notes): any state may be moved to Reset or to Error.
  for (ibv_qp_state from : kReachable) {
    t.push_back({from, IBV_QPS_RESET, 0, 0});
    t.push_back({from, IBV_QPS_ERR, 0, 0});
  }
  return t;
}

inline const Transition* find_transition(ibv_qp_state from, ibv_qp_state to) {
  static const std::vector<Transition> all = rc_transitions();
  for (const Transition& t : all)
    if (t.from == from && t.to == to) return &t;
  return nullptr;
}

inline ibv_ah_attr valid_av(const transport::Gid& dgid, uint8_t sgid_index = 1) {
  ibv_ah_attr av{};
  av.is_global = 1;
  av.port_num = 1;
  av.grh.sgid_index = sgid_index;
  av.grh.hop_limit = 64;
  std::memcpy(av.grh.dgid.raw, dgid.data(), 16);
  return av;
}

inline const transport::Gid kPeerGid = fake::ipv4_gid(10, 0, 0, 2);  // nobody is attached there

// Attributes with a valid value in every field, for any transition.
inline ibv_qp_attr full_attr(ibv_qp_state to, ibv_qp_state current) {
  ibv_qp_attr a{};
  a.qp_state = to;
  a.cur_qp_state = current;
  a.path_mtu = IBV_MTU_1024;
  a.path_mig_state = IBV_MIG_MIGRATED;
  a.qkey = 0x11111111;
  a.rq_psn = 0x123456;
  a.sq_psn = 0x654321;
  a.dest_qp_num = 0x4242;
  a.qp_access_flags =
      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  a.ah_attr = valid_av(kPeerGid);
  a.alt_ah_attr = valid_av(kPeerGid);
  a.pkey_index = 0;
  a.alt_pkey_index = 0;
  a.en_sqd_async_notify = 0;
  a.max_rd_atomic = 4;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.port_num = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.alt_port_num = 1;
  a.alt_timeout = 14;
  return a;
}

// The fields modify_qp may change, for "none of the attributes will be modified"
// (ibv_modify_qp(3) NOTES).
inline void expect_same_attributes(const ibv_qp_attr& x, const ibv_qp_attr& y,
                                   const std::string& what) {
  EXPECT_EQ(x.qp_state, y.qp_state) << what;
  EXPECT_EQ(x.path_mtu, y.path_mtu) << what;
  EXPECT_EQ(x.rq_psn, y.rq_psn) << what;
  EXPECT_EQ(x.sq_psn, y.sq_psn) << what;
  EXPECT_EQ(x.dest_qp_num, y.dest_qp_num) << what;
  EXPECT_EQ(x.qp_access_flags, y.qp_access_flags) << what;
  EXPECT_EQ(x.pkey_index, y.pkey_index) << what;
  EXPECT_EQ(x.port_num, y.port_num) << what;
  EXPECT_EQ(x.max_rd_atomic, y.max_rd_atomic) << what;
  EXPECT_EQ(x.max_dest_rd_atomic, y.max_dest_rd_atomic) << what;
  EXPECT_EQ(x.min_rnr_timer, y.min_rnr_timer) << what;
  EXPECT_EQ(x.timeout, y.timeout) << what;
  EXPECT_EQ(x.retry_cnt, y.retry_cnt) << what;
  EXPECT_EQ(x.rnr_retry, y.rnr_retry) << what;
  EXPECT_EQ(x.ah_attr.is_global, y.ah_attr.is_global) << what;
  EXPECT_EQ(x.ah_attr.grh.sgid_index, y.ah_attr.grh.sgid_index) << what;
  EXPECT_EQ(0, std::memcmp(x.ah_attr.grh.dgid.raw, y.ah_attr.grh.dgid.raw, 16)) << what;
}

// ---------------------------------------------------------------------------------
// Fixture: one device on the fake network, a PD, two CQs and an RC QP.
// ---------------------------------------------------------------------------------

class QpStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = net_.attach(fake::ipv4_gid(10, 0, 0, 1));
    device_ = std::make_unique<Device>(DeviceConfig{}, *transport_, roce::RoceFamily::maker(), clock_);
    int err = 0;
    pd_ = device_->alloc_pd(err);
    ASSERT_NE(pd_, nullptr);
    scq_ = device_->create_cq(256, err);
    rcq_ = device_->create_cq(256, err);
    ASSERT_NE(scq_, nullptr);
    ASSERT_NE(rcq_, nullptr);
    qp_ = make_qp();
    ASSERT_NE(qp_, nullptr);
  }

  Qp* make_qp(ibv_qp_cap cap = ibv_qp_cap{16, 16, 4, 4, 64}, bool sq_sig_all = false) {
    QpInit init;
    init.send_cq = scq_;
    init.recv_cq = rcq_;
    init.cap = cap;
    init.sq_sig_all = sq_sig_all;
    int err = 0;
    return device_->create_qp(pd_, init, err);
  }

  ibv_qp_attr query(Qp* qp) const {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(qp->query(attr, 0, init), 0);
    return attr;
  }

  int modify(Qp* qp, ibv_qp_state to, int mask) {
    return qp->modify(full_attr(to, qp->state()), IBV_QP_STATE | mask);
  }

  // Walks RESET -> INIT -> RTR -> RTS (-> SQD) with the required attributes, or
  // modifies straight to Reset / Error.
  void bring_to(Qp* qp, ibv_qp_state target) {
    ASSERT_EQ(modify(qp, IBV_QPS_RESET, 0), 0);
    if (target == IBV_QPS_RESET) return;
    if (target == IBV_QPS_ERR) {
      ASSERT_EQ(modify(qp, IBV_QPS_ERR, 0), 0);
      return;
    }
    ASSERT_EQ(modify(qp, IBV_QPS_INIT, kInitRequired), 0);
    if (target == IBV_QPS_INIT) return;
    ASSERT_EQ(modify(qp, IBV_QPS_RTR, kRtrRequired), 0);
    if (target == IBV_QPS_RTR) return;
    ASSERT_EQ(modify(qp, IBV_QPS_RTS, kRtsRequired), 0);
    if (target == IBV_QPS_RTS) return;
    ASSERT_EQ(target, IBV_QPS_SQD) << "unreachable for RC: " << name_of(target);
    ASSERT_EQ(modify(qp, IBV_QPS_SQD, 0), 0);
  }

  std::vector<ibv_wc> drain(Cq* cq) {
    std::vector<ibv_wc> wcs(1024);
    wcs.resize(size_t(cq->poll(int(wcs.size()), wcs.data())));
    return wcs;
  }

  // A send WR with no SGE (a zero-length SEND needs no memory).
  static ibv_send_wr send_wr(uint64_t wr_id, unsigned flags = IBV_SEND_SIGNALED) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = flags;
    return wr;
  }
  static ibv_recv_wr recv_wr(uint64_t wr_id) {
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    return wr;
  }
  int post_send(Qp* qp, ibv_send_wr& wr, const ibv_send_wr** bad = nullptr) {
    const ibv_send_wr* ignored = nullptr;
    return qp->post_send(&wr, bad != nullptr ? bad : &ignored);
  }
  int post_recv(Qp* qp, ibv_recv_wr& wr, const ibv_recv_wr** bad = nullptr) {
    const ibv_recv_wr* ignored = nullptr;
    return qp->post_recv(&wr, bad != nullptr ? bad : &ignored);
  }

  fake::FakeNetwork net_;
  ManualClock clock_;
  std::unique_ptr<fake::FakeTransport> transport_;
  std::unique_ptr<Device> device_;
  Pd* pd_ = nullptr;
  Cq* scq_ = nullptr;
  Cq* rcq_ = nullptr;
  Qp* qp_ = nullptr;
};

}  // namespace softrdma::engine::qp_testing
