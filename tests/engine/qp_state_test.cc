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

#include "engine/qp_state_fixture.h"

namespace softrdma::engine::qp_testing {
namespace {

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

// Raw packet and driver QPs are EOPNOTSUPP; a missing CQ is EINVAL
// (ibv_create_qp(3)).
TEST_F(QpStateTest, CreateQpRejectsOtherTypesAndMissingCqs) {
  for (ibv_qp_type type : {IBV_QPT_RAW_PACKET, IBV_QPT_DRIVER}) {
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

}  // namespace
}  // namespace softrdma::engine::qp_testing
