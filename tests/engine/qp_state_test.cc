// The QP verbs object for RC: the state machine and attribute rules of modify_qp
// (IBA 10.3.1, 11.2.5.2; ibv_modify_qp(3) and the kernel's ib_modify_qp_is_ok table
// for the optional attributes), create_qp validation (ibv_create_qp(3)), and what
// posting does in each state (IBA 10.8.2, 11.4.1; ibv_post_send(3), ibv_post_recv(3)).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/rc_fixture.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine {
namespace {

namespace fake = transport::fake;

// ---------------------------------------------------------------------------------
// The expectation: RC transitions with their required and optional attributes.
// ---------------------------------------------------------------------------------

constexpr int kCur = IBV_QP_CUR_STATE, kAccess = IBV_QP_ACCESS_FLAGS,
              kPkey = IBV_QP_PKEY_INDEX, kPort = IBV_QP_PORT, kAv = IBV_QP_AV,
              kMtu = IBV_QP_PATH_MTU, kTimeout = IBV_QP_TIMEOUT, kRetry = IBV_QP_RETRY_CNT,
              kRnrRetry = IBV_QP_RNR_RETRY, kRqPsn = IBV_QP_RQ_PSN,
              kRdAtomic = IBV_QP_MAX_QP_RD_ATOMIC, kAltPath = IBV_QP_ALT_PATH,
              kMinRnr = IBV_QP_MIN_RNR_TIMER, kSqPsn = IBV_QP_SQ_PSN,
              kDestRdAtomic = IBV_QP_MAX_DEST_RD_ATOMIC, kMig = IBV_QP_PATH_MIG_STATE,
              kDestQpn = IBV_QP_DEST_QPN, kSqdNotify = IBV_QP_EN_SQD_ASYNC_NOTIFY;

// Every attribute bit a caller can give besides IBV_QP_STATE.
constexpr int kAllAttributeBits[] = {
    IBV_QP_CUR_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX,
    IBV_QP_PORT,      IBV_QP_QKEY,                IBV_QP_AV,           IBV_QP_PATH_MTU,
    IBV_QP_TIMEOUT,   IBV_QP_RETRY_CNT,           IBV_QP_RNR_RETRY,    IBV_QP_RQ_PSN,
    IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_ALT_PATH,     IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN,
    IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_PATH_MIG_STATE, IBV_QP_CAP,  IBV_QP_DEST_QPN,
    IBV_QP_RATE_LIMIT};

constexpr int kInitRequired = kPkey | kPort | kAccess;
constexpr int kRtrRequired = kAv | kMtu | kDestQpn | kRqPsn | kDestRdAtomic | kMinRnr;
constexpr int kRtsRequired = kSqPsn | kTimeout | kRetry | kRnrRetry | kRdAtomic;

struct Transition {
  ibv_qp_state from;
  ibv_qp_state to;
  int required;
  int optional;
};

std::string name_of(ibv_qp_state s) {
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

std::string name_of(const Transition& t) { return name_of(t.from) + "->" + name_of(t.to); }

// The states an RC QP can be put in by modify_qp (SQE exists only for UC/UD).
constexpr ibv_qp_state kReachable[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                                       IBV_QPS_RTS,   IBV_QPS_SQD,  IBV_QPS_ERR};
constexpr ibv_qp_state kAllStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                       IBV_QPS_SQD,   IBV_QPS_SQE,  IBV_QPS_ERR};

std::vector<Transition> rc_transitions() {
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

const Transition* find_transition(ibv_qp_state from, ibv_qp_state to) {
  static const std::vector<Transition> all = rc_transitions();
  for (const Transition& t : all)
    if (t.from == from && t.to == to) return &t;
  return nullptr;
}

ibv_ah_attr valid_av(const transport::Gid& dgid, uint8_t sgid_index = 1) {
  ibv_ah_attr av{};
  av.is_global = 1;
  av.port_num = 1;
  av.grh.sgid_index = sgid_index;
  av.grh.hop_limit = 64;
  std::memcpy(av.grh.dgid.raw, dgid.data(), 16);
  return av;
}

const transport::Gid kPeerGid = fake::ipv4_gid(10, 0, 0, 2);  // nobody is attached there

// Attributes with a valid value in every field, for any transition.
ibv_qp_attr full_attr(ibv_qp_state to, ibv_qp_state current) {
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
void expect_same_attributes(const ibv_qp_attr& x, const ibv_qp_attr& y, const std::string& what) {
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
    device_ = std::make_unique<Device>(DeviceConfig{}, *transport_, clock_);
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

// ---------------------------------------------------------------------------------
// Transitions and their attributes.
// ---------------------------------------------------------------------------------

// A new QP is in Reset (IBA 10.3.1; ibv_create_qp(3)).
TEST_F(QpStateTest, NewQpIsInReset) {
  EXPECT_EQ(qp_->state(), IBV_QPS_RESET);
  EXPECT_EQ(query(qp_).qp_state, IBV_QPS_RESET);
}

// Every valid RC transition succeeds with exactly its required attributes
// (ibv_modify_qp(3) table; IBA 11.2.5.2).
TEST_F(QpStateTest, EveryValidTransitionSucceedsWithItsRequiredAttributes) {
  for (const Transition& t : rc_transitions()) {
    SCOPED_TRACE(name_of(t));
    bring_to(qp_, t.from);
    ASSERT_EQ(qp_->state(), t.from);
    EXPECT_EQ(modify(qp_, t.to, t.required), 0);
    EXPECT_EQ(qp_->state(), t.to);
    EXPECT_EQ(query(qp_).qp_state, t.to);
  }
}

// Every valid transition also takes all of its optional attributes at once
// (IBA 11.2.5.2; the kernel's qp_state_table opt_param for RC).
TEST_F(QpStateTest, EveryValidTransitionAcceptsItsOptionalAttributes) {
  for (const Transition& t : rc_transitions()) {
    SCOPED_TRACE(name_of(t));
    bring_to(qp_, t.from);
    EXPECT_EQ(modify(qp_, t.to, t.required | t.optional), 0)
        << "required 0x" << std::hex << t.required << " optional 0x" << t.optional;
    EXPECT_EQ(qp_->state(), t.to);
  }
}

// Leaving out any one required attribute is EINVAL, and nothing changes: neither the
// state nor any attribute (ibv_modify_qp(3) NOTES).
TEST_F(QpStateTest, MissingRequiredAttributeIsEinvalAndChangesNothing) {
  for (const Transition& t : rc_transitions()) {
    for (int bit : kAllAttributeBits) {
      if (!(t.required & bit)) continue;
      SCOPED_TRACE(name_of(t) + " without attribute bit 0x" + std::to_string(bit));
      bring_to(qp_, t.from);
      const ibv_qp_attr before = query(qp_);
      EXPECT_EQ(modify(qp_, t.to, t.required & ~bit), EINVAL);
      EXPECT_EQ(qp_->state(), t.from);
      expect_same_attributes(before, query(qp_), "after the refused modify");
    }
  }
}

// An attribute that is neither required nor optional in a transition is EINVAL
// (e.g. Q_Key on RC, CUR_STATE from Reset, CAP anywhere), and nothing changes.
TEST_F(QpStateTest, AttributeNotAllowedInTransitionIsEinval) {
  for (const Transition& t : rc_transitions()) {
    for (int bit : kAllAttributeBits) {
      if ((t.required | t.optional) & bit) continue;
      SCOPED_TRACE(name_of(t) + " with extra attribute bit 0x" + std::to_string(bit));
      bring_to(qp_, t.from);
      const ibv_qp_attr before = query(qp_);
      EXPECT_EQ(modify(qp_, t.to, t.required | bit), EINVAL);
      EXPECT_EQ(qp_->state(), t.from);
      expect_same_attributes(before, query(qp_), "after the refused modify");
    }
  }
}

// Transitions the RC state machine does not have are EINVAL, whatever attributes
// come with them: RESET->RTR, INIT->RTS, RTR->SQD, ERR->INIT, anything->SQE ...
// (IBA 10.3.1: SQE exists only for UC and UD).
TEST_F(QpStateTest, InvalidTransitionsAreEinval) {
  // The attributes a caller would bring to enter each state the normal way.
  auto entry_mask = [](ibv_qp_state to) {
    switch (to) {
      case IBV_QPS_INIT: return kInitRequired;
      case IBV_QPS_RTR: return kRtrRequired;
      case IBV_QPS_RTS: return kRtsRequired;
      default: return 0;
    }
  };
  int checked = 0;
  for (ibv_qp_state from : kReachable) {
    for (ibv_qp_state to : kAllStates) {
      if (find_transition(from, to) != nullptr) continue;
      SCOPED_TRACE(name_of(from) + "->" + name_of(to));
      bring_to(qp_, from);
      EXPECT_EQ(modify(qp_, to, entry_mask(to)), EINVAL);
      EXPECT_EQ(modify(qp_, to, 0), EINVAL);
      EXPECT_EQ(qp_->state(), from);
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);  // sanity: the matrix really has holes
}

// IBV_QPS_UNKNOWN is no state to move to: EINVAL, nothing changes. (Values outside
// the enum cannot be tested here: loading them is undefined behaviour in C++; the C
// shim must range-check the int it receives.)
TEST_F(QpStateTest, UnknownTargetStateIsEinval) {
  bring_to(qp_, IBV_QPS_INIT);
  ibv_qp_attr attr = full_attr(IBV_QPS_INIT, IBV_QPS_INIT);
  attr.qp_state = IBV_QPS_UNKNOWN;
  EXPECT_EQ(qp_->modify(attr, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(qp_->state(), IBV_QPS_INIT);
}

// Every state, Reset and Error included, can be moved to Reset and to Error
// (IBA 10.3.1 figure notes 2 and 3). Note: Linux's ib_modify_qp_is_ok refuses
// RESET->ERR; IBA allows it and so does softrdma.
TEST_F(QpStateTest, AnyStateToResetAndToError) {
  for (ibv_qp_state from : kReachable) {
    SCOPED_TRACE(name_of(from));
    bring_to(qp_, from);
    EXPECT_EQ(modify(qp_, IBV_QPS_RESET, 0), 0);
    EXPECT_EQ(qp_->state(), IBV_QPS_RESET);
    bring_to(qp_, from);
    EXPECT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
    EXPECT_EQ(qp_->state(), IBV_QPS_ERR);
  }
}

// A mask without IBV_QP_STATE modifies attributes in the current state (a transition
// to the same state): allowed in RTS for the optional ones, EINVAL for others.
TEST_F(QpStateTest, ModifyWithoutStateKeepsTheState) {
  bring_to(qp_, IBV_QPS_RTS);
  ibv_qp_attr attr = full_attr(IBV_QPS_RTS, IBV_QPS_RTS);
  attr.min_rnr_timer = 20;
  EXPECT_EQ(qp_->modify(attr, IBV_QP_MIN_RNR_TIMER), 0);
  EXPECT_EQ(qp_->state(), IBV_QPS_RTS);
  EXPECT_EQ(query(qp_).min_rnr_timer, 20);
  EXPECT_EQ(qp_->modify(attr, IBV_QP_DEST_QPN), EINVAL);
}

// IBV_QP_CUR_STATE names the state the caller believes the QP is in: a mismatch is
// EINVAL and changes nothing; the right one is accepted (IBA 11.2.5.2).
TEST_F(QpStateTest, CurStateMismatchIsEinval) {
  bring_to(qp_, IBV_QPS_RTR);
  ibv_qp_attr attr = full_attr(IBV_QPS_RTS, IBV_QPS_RTS);  // wrong: the QP is in RTR
  EXPECT_EQ(qp_->modify(attr, IBV_QP_STATE | kRtsRequired | kCur), EINVAL);
  EXPECT_EQ(qp_->state(), IBV_QPS_RTR);
  attr.cur_qp_state = IBV_QPS_INIT;
  EXPECT_EQ(qp_->modify(attr, IBV_QP_STATE | kRtsRequired | kCur), EINVAL);
  attr.cur_qp_state = IBV_QPS_RTR;
  EXPECT_EQ(qp_->modify(attr, IBV_QP_STATE | kRtsRequired | kCur), 0);
  EXPECT_EQ(qp_->state(), IBV_QPS_RTS);

  attr = full_attr(IBV_QPS_RTS, IBV_QPS_SQD);  // RTS->RTS claiming SQD
  EXPECT_EQ(qp_->modify(attr, IBV_QP_STATE | kCur), EINVAL);
  attr.cur_qp_state = IBV_QPS_RTS;
  EXPECT_EQ(qp_->modify(attr, IBV_QP_STATE | kCur), 0);
}

// ---------------------------------------------------------------------------------
// Values out of range.
// ---------------------------------------------------------------------------------

struct BadValue {
  const char* what;
  ibv_qp_state from;
  ibv_qp_state to;
  int mask;
  void (*set)(ibv_qp_attr&, const Device&);
};

// Out-of-range attribute values are EINVAL and change nothing: retry_cnt and
// rnr_retry are 3 bits, timeout and min_rnr_timer 5 bits (IBA 9.7.6.1.3, 9.7.5.2.8,
// 11.2.5.2), path MTU one of 256..4096, one port, a one-entry P_Key table, a GID
// index inside the table, GRH mandatory on RoCE (IBA A17.4.5), RD/atomic resources
// within the device limits (ibv_query_device max_qp_rd_atom / max_qp_init_rd_atom).
TEST_F(QpStateTest, OutOfRangeValuesAreEinval) {
  const BadValue cases[] = {
      {"retry_cnt 8", IBV_QPS_RTR, IBV_QPS_RTS, kRtsRequired,
       [](ibv_qp_attr& a, const Device&) { a.retry_cnt = 8; }},
      {"rnr_retry 8", IBV_QPS_RTR, IBV_QPS_RTS, kRtsRequired,
       [](ibv_qp_attr& a, const Device&) { a.rnr_retry = 8; }},
      {"timeout 32", IBV_QPS_RTR, IBV_QPS_RTS, kRtsRequired,
       [](ibv_qp_attr& a, const Device&) { a.timeout = 32; }},
      {"max_rd_atomic above max_qp_init_rd_atom", IBV_QPS_RTR, IBV_QPS_RTS, kRtsRequired,
       [](ibv_qp_attr& a, const Device& d) {
         a.max_rd_atomic = uint8_t(d.limits().max_qp_init_rd_atom + 1);
       }},
      {"min_rnr_timer 32", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device&) { a.min_rnr_timer = 32; }},
      {"min_rnr_timer 32 in RTS", IBV_QPS_RTS, IBV_QPS_RTS, kMinRnr,
       [](ibv_qp_attr& a, const Device&) { a.min_rnr_timer = 32; }},
      {"path_mtu 0", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device&) { a.path_mtu = static_cast<ibv_mtu>(0); }},
      {"path_mtu 6", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device&) { a.path_mtu = static_cast<ibv_mtu>(6); }},
      {"port 0", IBV_QPS_RESET, IBV_QPS_INIT, kInitRequired,
       [](ibv_qp_attr& a, const Device&) { a.port_num = 0; }},
      {"port 2", IBV_QPS_RESET, IBV_QPS_INIT, kInitRequired,
       [](ibv_qp_attr& a, const Device&) { a.port_num = 2; }},
      {"pkey_index 1", IBV_QPS_RESET, IBV_QPS_INIT, kInitRequired,
       [](ibv_qp_attr& a, const Device&) { a.pkey_index = 1; }},
      {"pkey_index 1 at RTR", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired | kPkey,
       [](ibv_qp_attr& a, const Device&) { a.pkey_index = 1; }},
      {"sgid_index = GID table size", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device& d) { a.ah_attr.grh.sgid_index = uint8_t(d.gids().size()); }},
      {"sgid_index 255", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device&) { a.ah_attr.grh.sgid_index = 255; }},
      {"is_global 0 on RoCE", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device&) { a.ah_attr.is_global = 0; }},
      {"ah_attr port 2", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device&) { a.ah_attr.port_num = 2; }},
      {"max_dest_rd_atomic above max_qp_rd_atom", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device& d) {
         a.max_dest_rd_atomic = uint8_t(d.limits().max_qp_rd_atom + 1);
       }},
      {"dest_qp_num above 24 bits", IBV_QPS_INIT, IBV_QPS_RTR, kRtrRequired,
       [](ibv_qp_attr& a, const Device&) { a.dest_qp_num = 1u << 24; }},
      {"retry_cnt 8 in SQD", IBV_QPS_SQD, IBV_QPS_SQD, kRetry,
       [](ibv_qp_attr& a, const Device&) { a.retry_cnt = 8; }},
  };
  ASSERT_LT(device_->limits().max_qp_init_rd_atom, 255u) << "limit does not fit uint8_t + 1";
  ASSERT_LT(device_->limits().max_qp_rd_atom, 255u);
  for (const BadValue& c : cases) {
    SCOPED_TRACE(c.what);
    bring_to(qp_, c.from);
    const ibv_qp_attr before = query(qp_);
    ibv_qp_attr attr = full_attr(c.to, c.from);
    c.set(attr, *device_);
    EXPECT_EQ(qp_->modify(attr, IBV_QP_STATE | c.mask), EINVAL);
    EXPECT_EQ(qp_->state(), c.from);
    expect_same_attributes(before, query(qp_), "after the refused modify");
  }
}

// The largest legal values are accepted: retry_cnt 7, rnr_retry 7 (infinite),
// timeout 31, min_rnr_timer 31, MTU 256 and 4096, either GID, the device's RD/atomic
// limits, a 24-bit QPN (IBA 9.7.6.1.3, 9.7.5.2.8; ibv_query_device).
TEST_F(QpStateTest, BoundaryValuesAreAccepted) {
  for (ibv_mtu mtu : {IBV_MTU_256, IBV_MTU_4096}) {
    for (uint8_t sgid : {0, 1}) {
      SCOPED_TRACE("mtu " + std::to_string(int(mtu)) + " sgid " + std::to_string(sgid));
      bring_to(qp_, IBV_QPS_INIT);
      ibv_qp_attr attr = full_attr(IBV_QPS_RTR, IBV_QPS_INIT);
      attr.path_mtu = mtu;
      attr.ah_attr.grh.sgid_index = sgid;
      attr.min_rnr_timer = 31;
      attr.max_dest_rd_atomic = uint8_t(device_->limits().max_qp_rd_atom);
      attr.dest_qp_num = 0xffffff;
      ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kRtrRequired), 0);
      attr = full_attr(IBV_QPS_RTS, IBV_QPS_RTR);
      attr.retry_cnt = 7;
      attr.rnr_retry = 7;
      attr.timeout = 31;
      attr.max_rd_atomic = uint8_t(device_->limits().max_qp_init_rd_atom);
      ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kRtsRequired), 0);
      const ibv_qp_attr got = query(qp_);
      EXPECT_EQ(got.path_mtu, mtu);
      EXPECT_EQ(got.ah_attr.grh.sgid_index, sgid);
      EXPECT_EQ(got.retry_cnt, 7);
      EXPECT_EQ(got.rnr_retry, 7);
      EXPECT_EQ(got.timeout, 31);
      EXPECT_EQ(got.min_rnr_timer, 31);
      EXPECT_EQ(got.dest_qp_num, 0xffffffu);
    }
  }
}

// query returns the state and every attribute set on the way to RTS, the caps and
// the type (ibv_query_qp(3)); PSNs are 24 bits (IBA 9.7.1).
TEST_F(QpStateTest, QueryReturnsStateAndAttributes) {
  ibv_qp_attr attr = full_attr(IBV_QPS_INIT, IBV_QPS_RESET);
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kInitRequired), 0);
  attr = full_attr(IBV_QPS_RTR, IBV_QPS_INIT);
  attr.path_mtu = IBV_MTU_2048;
  attr.dest_qp_num = 0xabcdef;
  attr.rq_psn = 0x00123456;
  attr.max_dest_rd_atomic = 7;
  attr.min_rnr_timer = 9;
  attr.ah_attr = valid_av(kPeerGid, 0);
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kRtrRequired), 0);
  attr = full_attr(IBV_QPS_RTS, IBV_QPS_RTR);
  attr.sq_psn = 0xff654321;  // only the low 24 bits are a PSN
  attr.timeout = 18;
  attr.retry_cnt = 5;
  attr.rnr_retry = 6;
  attr.max_rd_atomic = 3;
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kRtsRequired), 0);

  ibv_qp_attr got{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(qp_->query(got, ~0, init), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(got.qp_access_flags, unsigned(IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(got.port_num, 1);
  EXPECT_EQ(got.pkey_index, 0);
  EXPECT_EQ(got.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(got.dest_qp_num, 0xabcdefu);
  EXPECT_EQ(got.rq_psn, 0x123456u);
  EXPECT_EQ(got.sq_psn, 0x654321u);
  EXPECT_EQ(got.max_dest_rd_atomic, 7);
  EXPECT_EQ(got.min_rnr_timer, 9);
  EXPECT_EQ(got.timeout, 18);
  EXPECT_EQ(got.retry_cnt, 5);
  EXPECT_EQ(got.rnr_retry, 6);
  EXPECT_EQ(got.max_rd_atomic, 3);
  EXPECT_EQ(got.ah_attr.is_global, 1);
  EXPECT_EQ(got.ah_attr.grh.sgid_index, 0);
  EXPECT_EQ(0, std::memcmp(got.ah_attr.grh.dgid.raw, kPeerGid.data(), 16));
  EXPECT_EQ(got.cap.max_send_wr, qp_->cap().max_send_wr);
  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
  EXPECT_EQ(init.cap.max_send_wr, qp_->cap().max_send_wr);
  EXPECT_EQ(init.cap.max_recv_sge, qp_->cap().max_recv_sge);
  EXPECT_EQ(init.cap.max_inline_data, qp_->cap().max_inline_data);
  EXPECT_EQ(init.sq_sig_all, 0);

  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  ASSERT_EQ(qp_->query(got, IBV_QP_STATE, init), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_ERR);
}

// ---------------------------------------------------------------------------------
// create_qp.
// ---------------------------------------------------------------------------------

// Capabilities beyond the device limits are EINVAL; the QP gets at least what it
// asked for and cap reports it (ibv_create_qp(3); IBA 11.2.5.1).
TEST_F(QpStateTest, CreateQpValidatesCapabilities) {
  const DeviceLimits& lim = device_->limits();
  struct {
    const char* what;
    ibv_qp_cap cap;
  } too_big[] = {
      {"max_send_wr", {lim.max_qp_wr + 1, 1, 1, 1, 0}},
      {"max_recv_wr", {1, lim.max_qp_wr + 1, 1, 1, 0}},
      {"max_send_sge", {1, 1, lim.max_sge + 1, 1, 0}},
      {"max_recv_sge", {1, 1, 1, lim.max_sge + 1, 0}},
      {"max_inline_data", {1, 1, 1, 1, lim.max_inline_data + 1}},
  };
  for (const auto& c : too_big) {
    SCOPED_TRACE(c.what);
    QpInit init;
    init.send_cq = scq_;
    init.recv_cq = rcq_;
    init.cap = c.cap;
    int err = 0;
    EXPECT_EQ(device_->create_qp(pd_, init, err), nullptr);
    EXPECT_EQ(err, EINVAL);
  }
  const ibv_qp_cap asks[] = {{1, 1, 1, 1, 0},
                             {0, 0, 0, 0, 0},
                             {100, 500, 3, 5, 100},
                             {lim.max_qp_wr, lim.max_qp_wr, lim.max_sge, lim.max_sge,
                              lim.max_inline_data}};
  for (const ibv_qp_cap& ask : asks) {
    QpInit init;
    init.send_cq = scq_;
    init.recv_cq = rcq_;
    init.cap = ask;
    int err = 0;
    Qp* qp = device_->create_qp(pd_, init, err);
    ASSERT_NE(qp, nullptr) << err;
    EXPECT_GE(init.cap.max_send_wr, ask.max_send_wr);
    EXPECT_GE(init.cap.max_recv_wr, ask.max_recv_wr);
    EXPECT_GE(init.cap.max_send_sge, ask.max_send_sge);
    EXPECT_GE(init.cap.max_recv_sge, ask.max_recv_sge);
    EXPECT_GE(init.cap.max_inline_data, ask.max_inline_data);
    EXPECT_LE(init.cap.max_send_wr, lim.max_qp_wr);
    EXPECT_LE(init.cap.max_send_sge, lim.max_sge);
    EXPECT_EQ(qp->cap().max_send_wr, init.cap.max_send_wr);
    EXPECT_EQ(qp->cap().max_recv_wr, init.cap.max_recv_wr);
    EXPECT_EQ(qp->state(), IBV_QPS_RESET);
    EXPECT_EQ(device_->destroy_qp(qp), 0);
  }
}

// Only RC is served for now: UC, UD and others are EOPNOTSUPP; a missing CQ is
// EINVAL (ibv_create_qp(3)).
TEST_F(QpStateTest, CreateQpRejectsOtherTypesAndMissingCqs) {
  for (ibv_qp_type type : {IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND}) {
    QpInit init;
    init.type = type;
    init.send_cq = scq_;
    init.recv_cq = rcq_;
    init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
    int err = 0;
    EXPECT_EQ(device_->create_qp(pd_, init, err), nullptr) << type;
    EXPECT_EQ(err, EOPNOTSUPP) << type;
  }
  QpInit init;
  init.send_cq = scq_;
  init.recv_cq = nullptr;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  int err = 0;
  EXPECT_EQ(device_->create_qp(pd_, init, err), nullptr);
  EXPECT_EQ(err, EINVAL);
  init.send_cq = nullptr;
  init.recv_cq = rcq_;
  EXPECT_EQ(device_->create_qp(pd_, init, err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

// ---------------------------------------------------------------------------------
// Posting.
// ---------------------------------------------------------------------------------

// Send work may be posted from RTS on: in Reset, Init and RTR it is EINVAL, bad_wr
// names the first WR and nothing is queued or sent (IBA 10.3.1; ibv_post_send(3)).
TEST_F(QpStateTest, PostSendBeforeRtsIsEinval) {
  for (ibv_qp_state s : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR}) {
    SCOPED_TRACE(name_of(s));
    bring_to(qp_, s);
    ibv_send_wr second = send_wr(2);
    ibv_send_wr first = send_wr(1);
    first.next = &second;
    const ibv_send_wr* bad = nullptr;
    EXPECT_EQ(post_send(qp_, first, &bad), EINVAL);
    EXPECT_EQ(bad, &first);
    EXPECT_TRUE(qp_->sq().empty());
  }
  EXPECT_EQ(net_.sent_count(), 0u);
  EXPECT_EQ(scq_->depth(), 0u);
}

// Receive work may be posted from Init on; in Reset it is EINVAL with bad_wr set
// (IBA 10.3.1; ibv_post_recv(3)).
TEST_F(QpStateTest, PostRecvInResetIsEinval) {
  ibv_recv_wr wr = recv_wr(1);
  const ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(post_recv(qp_, wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(qp_->rq().empty());
  for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD}) {
    SCOPED_TRACE(name_of(s));
    bring_to(qp_, s);
    EXPECT_EQ(post_recv(qp_, wr), 0);
    EXPECT_EQ(qp_->rq().size(), 1u);
  }
}

// More SGEs than the QP's max_send_sge / max_recv_sge is EINVAL; bad_wr names that
// WR and the WRs before it stay posted (ibv_post_send(3), ibv_post_recv(3)).
TEST_F(QpStateTest, TooManySgesIsEinvalWithBadWr) {
  bring_to(qp_, IBV_QPS_RTS);
  std::vector<ibv_sge> sges(qp_->cap().max_send_sge + 1, ibv_sge{0, 0, 0});
  ibv_send_wr third = send_wr(3);
  ibv_send_wr second = send_wr(2);
  second.sg_list = sges.data();
  second.num_sge = int(sges.size());
  second.next = &third;
  ibv_send_wr first = send_wr(1);
  first.next = &second;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp_, first, &bad), EINVAL);
  EXPECT_EQ(bad, &second);
  EXPECT_EQ(qp_->sq().size(), 1u);

  second.num_sge = -1;
  second.next = nullptr;
  bad = nullptr;
  EXPECT_EQ(post_send(qp_, second, &bad), EINVAL);
  EXPECT_EQ(bad, &second);

  std::vector<ibv_sge> rsges(qp_->cap().max_recv_sge + 1, ibv_sge{0, 0, 0});
  ibv_recv_wr rsecond = recv_wr(2);
  rsecond.sg_list = rsges.data();
  rsecond.num_sge = int(rsges.size());
  ibv_recv_wr rfirst = recv_wr(1);
  rfirst.next = &rsecond;
  const ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(post_recv(qp_, rfirst, &rbad), EINVAL);
  EXPECT_EQ(rbad, &rsecond);
  EXPECT_EQ(qp_->rq().size(), 1u);
}

// A full send queue is ENOMEM with bad_wr at the first WR that did not fit; so is a
// full receive queue (ibv_post_send(3): the failure is returned per WR; verbs
// providers return ENOMEM for a full queue).
TEST_F(QpStateTest, FullQueuesAreEnomem) {
  bring_to(qp_, IBV_QPS_RTS);  // the peer is absent: nothing is ever acknowledged
  const uint32_t depth = qp_->cap().max_send_wr;
  std::vector<ibv_send_wr> wrs(depth + 2);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i] = send_wr(i, 0);
    if (i + 1 < wrs.size()) wrs[i].next = &wrs[i + 1];
  }
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp_, wrs[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth]);
  EXPECT_EQ(qp_->sq().size(), depth);

  const uint32_t rdepth = qp_->cap().max_recv_wr;
  std::vector<ibv_recv_wr> rwrs(rdepth + 1);
  for (size_t i = 0; i < rwrs.size(); ++i) {
    rwrs[i] = recv_wr(i);
    if (i + 1 < rwrs.size()) rwrs[i].next = &rwrs[i + 1];
  }
  const ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(post_recv(qp_, rwrs[0], &rbad), ENOMEM);
  EXPECT_EQ(rbad, &rwrs[rdepth]);
  EXPECT_EQ(qp_->rq().size(), rdepth);
}

// Inline data longer than the QP's max_inline_data is EINVAL; exactly that much is
// accepted without any lkey (ibv_post_send(3): "The L_Key will not be checked");
// INLINE on a READ is EINVAL ("Valid only for Send and RDMA Write").
TEST_F(QpStateTest, InlineLimitIsEnforced) {
  bring_to(qp_, IBV_QPS_RTS);
  const uint32_t max_inline = qp_->cap().max_inline_data;
  ASSERT_GT(max_inline, 1u);
  std::vector<uint8_t> buf(max_inline + 1, 0xab);
  ibv_sge sge{uint64_t(uintptr_t(buf.data())), max_inline + 1, 0};
  ibv_send_wr wr = send_wr(1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);

  // Two SGEs together one byte too long.
  ibv_sge two[2] = {{uint64_t(uintptr_t(buf.data())), max_inline / 2, 0},
                    {uint64_t(uintptr_t(buf.data())), max_inline - max_inline / 2 + 1, 0}};
  wr.sg_list = two;
  wr.num_sge = 2;
  EXPECT_EQ(post_send(qp_, wr), EINVAL);

  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = 0x1000;
  wr.wr.rdma.rkey = 0x1234;
  EXPECT_EQ(post_send(qp_, wr), EINVAL);
  EXPECT_TRUE(qp_->sq().empty());

  sge.length = max_inline;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  EXPECT_EQ(post_send(qp_, wr), 0);
  wr.opcode = IBV_WR_SEND;
  EXPECT_EQ(post_send(qp_, wr), 0);
  EXPECT_EQ(qp_->sq().size(), 2u);

  wr.opcode = IBV_WR_RDMA_READ;
  sge.length = 8;
  bad = nullptr;
  EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

// An atomic takes exactly one SGE of 8 bytes (IBA 9.4.5: atomics operate on 64-bit
// quantities); any other length or SGE count is EINVAL.
TEST_F(QpStateTest, AtomicNeedsOneEightByteSge) {
  bring_to(qp_, IBV_QPS_RTS);
  int err = 0;
  alignas(8) uint64_t local[2] = {0, 0};
  Mr* mr = device_->reg_mr(pd_, local, sizeof local, uint64_t(uintptr_t(local)),
                           IBV_ACCESS_LOCAL_WRITE, err);
  ASSERT_NE(mr, nullptr);
  for (ibv_wr_opcode opcode : {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    ibv_sge sges[2] = {{uint64_t(uintptr_t(local)), 8, mr->key},
                       {uint64_t(uintptr_t(local + 1)), 8, mr->key}};
    ibv_send_wr wr = send_wr(7);
    wr.opcode = opcode;
    wr.sg_list = sges;
    wr.wr.atomic.remote_addr = 0x10000;
    wr.wr.atomic.rkey = 0x1234;
    for (uint32_t length : {0u, 4u, 7u, 9u, 16u}) {
      sges[0].length = length;
      wr.num_sge = 1;
      const ibv_send_wr* bad = nullptr;
      EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL) << "length " << length;
      EXPECT_EQ(bad, &wr);
    }
    sges[0].length = 8;
    wr.num_sge = 0;
    EXPECT_EQ(post_send(qp_, wr), EINVAL) << "no SGE";
    wr.num_sge = 2;
    EXPECT_EQ(post_send(qp_, wr), EINVAL) << "two SGEs";
    const uint32_t queued = qp_->sq().size();
    wr.num_sge = 1;
    EXPECT_EQ(post_send(qp_, wr), 0);
    EXPECT_EQ(qp_->sq().size(), queued + 1);
  }
  EXPECT_EQ(qp_->sq().size(), 2u);
}

// An opcode RC does not serve is refused at post time with bad_wr set: TSO (UD and
// raw packet only, ibv_post_send(3) opcode table), the driver opcode, and the
// 12..14 gap of the enum.
TEST_F(QpStateTest, UnservedOpcodeIsEinval) {
  bring_to(qp_, IBV_QPS_RTS);
  for (int opcode : {int(IBV_WR_TSO), int(IBV_WR_DRIVER1), 12, 13, 14}) {
    ibv_send_wr wr = send_wr(1);
    wr.opcode = static_cast<ibv_wr_opcode>(opcode);
    const ibv_send_wr* bad = nullptr;
    EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL) << opcode;
    EXPECT_EQ(bad, &wr);
  }
  EXPECT_TRUE(qp_->sq().empty());
}

// In Error every WR posted completes at once with IBV_WC_WR_FLUSH_ERR, signaled or
// not, in order, on both queues (IBA 10.3.1 Error state; ibv_poll_cq(3): then only
// wr_id, status, qp_num are valid).
TEST_F(QpStateTest, PostingInErrorFlushesEveryWr) {
  bring_to(qp_, IBV_QPS_RTS);
  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  ibv_send_wr wrs[3] = {send_wr(11, IBV_SEND_SIGNALED), send_wr(12, 0),
                        send_wr(13, IBV_SEND_SIGNALED)};
  wrs[0].next = &wrs[1];
  wrs[1].next = &wrs[2];
  EXPECT_EQ(post_send(qp_, wrs[0]), 0);
  auto wcs = drain(scq_);
  ASSERT_EQ(wcs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 11 + i);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wcs[i].qp_num, qp_->qpn());
  }
  ibv_recv_wr rwrs[2] = {recv_wr(21), recv_wr(22)};
  rwrs[0].next = &rwrs[1];
  EXPECT_EQ(post_recv(qp_, rwrs[0]), 0);
  auto rwcs = drain(rcq_);
  ASSERT_EQ(rwcs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rwcs[i].wr_id, 21 + i);
    EXPECT_EQ(rwcs[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(rwcs[i].qp_num, qp_->qpn());
  }
  EXPECT_TRUE(qp_->sq().empty());
  EXPECT_TRUE(qp_->rq().empty());
  EXPECT_EQ(drain(scq_).size(), 0u);
}

// Moving to Error flushes every outstanding WQE, receive and send, signaled or not,
// in posting order (IBA 10.3.1; 10.8.3).
TEST_F(QpStateTest, MovingToErrorFlushesOutstandingWork) {
  bring_to(qp_, IBV_QPS_INIT);
  ibv_recv_wr rwrs[3] = {recv_wr(1), recv_wr(2), recv_wr(3)};
  rwrs[0].next = &rwrs[1];
  rwrs[1].next = &rwrs[2];
  ASSERT_EQ(post_recv(qp_, rwrs[0]), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTR, kRtrRequired), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, kRtsRequired), 0);
  ibv_send_wr wrs[2] = {send_wr(101, 0), send_wr(102, IBV_SEND_SIGNALED)};
  wrs[0].next = &wrs[1];
  ASSERT_EQ(post_send(qp_, wrs[0]), 0);  // sent, never acknowledged
  EXPECT_EQ(drain(rcq_).size(), 0u);

  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  auto rwcs = drain(rcq_);
  ASSERT_EQ(rwcs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rwcs[i].wr_id, 1 + i);
    EXPECT_EQ(rwcs[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  auto swcs = drain(scq_);
  ASSERT_EQ(swcs.size(), 2u);
  EXPECT_EQ(swcs[0].wr_id, 101u);
  EXPECT_EQ(swcs[1].wr_id, 102u);
  EXPECT_EQ(swcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(swcs[1].status, IBV_WC_WR_FLUSH_ERR);

  // Error -> Error again flushes nothing twice.
  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  EXPECT_EQ(drain(rcq_).size() + drain(scq_).size(), 0u);
}

// Reset empties both work queues without any completion; the QP can then be brought
// up again and its queues hold their full depth (IBA 10.3.1 Reset state).
TEST_F(QpStateTest, ResetClearsQueuesWithoutCompletions) {
  bring_to(qp_, IBV_QPS_INIT);
  ibv_recv_wr r1 = recv_wr(1);
  ASSERT_EQ(post_recv(qp_, r1), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTR, kRtrRequired), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, kRtsRequired), 0);
  ibv_send_wr s1 = send_wr(2);
  ASSERT_EQ(post_send(qp_, s1), 0);
  ASSERT_FALSE(qp_->sq().empty());

  ASSERT_EQ(modify(qp_, IBV_QPS_RESET, 0), 0);
  EXPECT_TRUE(qp_->sq().empty());
  EXPECT_TRUE(qp_->rq().empty());
  EXPECT_EQ(scq_->depth(), 0u);
  EXPECT_EQ(rcq_->depth(), 0u);

  bring_to(qp_, IBV_QPS_RTS);
  for (uint32_t i = 0; i < qp_->cap().max_send_wr; ++i) {
    ibv_send_wr wr = send_wr(100 + i, 0);
    ASSERT_EQ(post_send(qp_, wr), 0) << i;
  }
  for (uint32_t i = 0; i < qp_->cap().max_recv_wr; ++i) {
    ibv_recv_wr wr = recv_wr(200 + i);
    ASSERT_EQ(post_recv(qp_, wr), 0) << i;
  }

  // After Error flushed them, Reset adds no completion of its own.
  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  drain(scq_);
  drain(rcq_);
  ASSERT_EQ(modify(qp_, IBV_QPS_RESET, 0), 0);
  EXPECT_EQ(scq_->depth() + rcq_->depth(), 0u);
}

// RTS -> SQD with en_sqd_async_notify raises IBV_EVENT_SQ_DRAINED for this QP once
// nothing is outstanding; without it, no event (IBA 10.3.1 SQD, 11.6.3 affiliated
// asynchronous events; ibv_get_async_event(3)).
TEST_F(QpStateTest, SqdWithNotifyRaisesSqDrained) {
  bring_to(qp_, IBV_QPS_RTS);
  ibv_qp_attr attr = full_attr(IBV_QPS_SQD, IBV_QPS_RTS);
  attr.en_sqd_async_notify = 1;
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kSqdNotify), 0);
  EXPECT_EQ(qp_->state(), IBV_QPS_SQD);
  AsyncEvent event{};
  ASSERT_TRUE(device_->next_async_event(event));
  EXPECT_EQ(event.type, IBV_EVENT_SQ_DRAINED);
  EXPECT_EQ(event.qpn, qp_->qpn());
  EXPECT_FALSE(device_->next_async_event(event)) << "reported once";

  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, 0), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_SQD, 0), 0);  // no notification asked for
  EXPECT_FALSE(device_->next_async_event(event));
}

// In SQD new send WRs may be posted but are not started until the QP is back in RTS
// (IBA 10.3.1 SQD: the send queue stops processing new WQEs).
TEST_F(QpStateTest, SqdQueuesPostedSendsUntilRts) {
  bring_to(qp_, IBV_QPS_SQD);
  net_.take_sent();
  ibv_send_wr wr = send_wr(1);
  EXPECT_EQ(post_send(qp_, wr), 0);
  EXPECT_EQ(net_.sent_count(), 0u);
  EXPECT_EQ(qp_->sq().size(), 1u);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, 0), 0);
  EXPECT_EQ(net_.sent_count(), 1u);
}

// A new primary path given in SQD (SQD->SQD with IBV_QP_AV, IBA 10.3.1: SQD is where
// path attributes may be changed) is the one the QP sends on after returning to RTS.
TEST_F(QpStateTest, PathChangedInSqdIsUsed) {
  bring_to(qp_, IBV_QPS_SQD);
  const transport::Gid moved = fake::ipv4_gid(10, 0, 0, 3);
  ibv_qp_attr attr = full_attr(IBV_QPS_SQD, IBV_QPS_SQD);
  attr.ah_attr = valid_av(moved);
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kAv), 0);
  ibv_qp_attr got = query(qp_);
  EXPECT_EQ(0, std::memcmp(got.ah_attr.grh.dgid.raw, moved.data(), 16));
  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, 0), 0);
  net_.take_sent();
  ibv_send_wr wr = send_wr(1);
  ASSERT_EQ(post_send(qp_, wr), 0);
  auto sent = net_.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].dst, moved) << "still sent on the old path";
}

// With a message sent and not yet acknowledged, SQ_DRAINED comes only when its ACK
// arrives, not at the modify (IBA 10.3.1: the SQ drains in-progress messages first).
class QpSqdDrainTest : public testing::RcPairTest {};

TEST_F(QpSqdDrainTest, SqDrainedWaitsForOutstandingAck) {
  post_recv(b, 0, 64, 1);
  net_.hold(fake::match::from(b.device->gids()[1]));  // hold b's ACK
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, 7), 0);
  pump();
  ASSERT_EQ(net_.held_count(), 1u);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_SQD;
  attr.en_sqd_async_notify = 1;
  ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  AsyncEvent event{};
  EXPECT_FALSE(a.device->next_async_event(event)) << "the SEND is not acknowledged yet";

  net_.clear_rules();
  net_.release_held();
  pump();
  ASSERT_TRUE(a.device->next_async_event(event));
  EXPECT_EQ(event.type, IBV_EVENT_SQ_DRAINED);
  EXPECT_EQ(event.qpn, a.qp->qpn());
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace softrdma::engine
