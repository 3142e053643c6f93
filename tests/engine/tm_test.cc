// Tag-matching SRQs (ibv_create_srq_ex(3) IBV_SRQT_TM, ibv_post_srq_ops(3),
// rdma-core's Documentation/tag_matching.md): the tag list, matching of eager and
// rendezvous messages, unexpected and NO_TAG messages, the synchronisation of the
// unexpected count, and the errors the man page and mlx5 give.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/rc_fixture.h"

namespace softrdma::engine::testing {
namespace {

constexpr uint64_t kAllBits = ~uint64_t(0);

// Over both paths (TestPath): with the devices publishing to their host, a TM
// SRQ's messages and its rendezvous READs still take the wire (its tag list is
// matched by its owner: docs/decisions/same-host.md), next to the QPs' other
// traffic on the same-host path.
class TmTest : public RcPairTest, public ::testing::WithParamInterface<TestPath> {
 protected:
  void SetUp() override {
    take_path(GetParam());
    wire_traffic_expected_ = true;  // a TM SRQ is not published: its traffic takes the wire
    RcPairTest::SetUp();
    int err = 0;
    SrqInit init;
    init.type = IBV_SRQT_TM;
    init.attr = ibv_srq_attr{16, 1, 0};
    init.cq = b.rcq;
    init.tm = ibv_tm_cap{kTags, 4};
    tm_ = b.device->create_srq(b.pd, init, err);
    ASSERT_NE(tm_, nullptr) << err;
    QpInit qi;
    qi.send_cq = a.scq;
    qi.recv_cq = a.rcq;
    qi.cap = ibv_qp_cap{16, 16, 1, 1, 64};
    sender_ = a.device->create_qp(a.pd, qi, err);
    qi.send_cq = b.scq;
    qi.recv_cq = b.rcq;
    qi.cap = ibv_qp_cap{0, 0, 0, 0, 0};  // as pyverbs' tests: the TM SRQ uses the SQ
    qi.srq = tm_;
    receiver_ = b.device->create_qp(b.pd, qi, err);
    ASSERT_TRUE(sender_ != nullptr && receiver_ != nullptr) << err;
    const int all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    connect_qp(*sender_, *b.device, receiver_->qpn(), 7, 9, all, options_);
    connect_qp(*receiver_, *a.device, sender_->qpn(), 9, 7, all, options_);
  }

  // Also called by connect() before the nodes exist.
  void TearDown() override {
    if (receiver_ != nullptr) b.device->destroy_qp(receiver_);
    if (sender_ != nullptr) a.device->destroy_qp(sender_);
    if (tm_ != nullptr) b.device->destroy_srq(tm_);
    receiver_ = sender_ = nullptr;
    tm_ = nullptr;
    RcPairTest::TearDown();
  }

  // One list operation; its wr stays in op_ (ADD returns the handle there).
  int op(ibv_ops_wr_opcode opcode, uint64_t wr_id, uint64_t tag = 0, size_t offset = 0,
         uint32_t length = 0, int flags = IBV_OPS_SIGNALED) {
    sge_ = ibv_sge{b.addr(offset), length, b.mr->key};
    op_ = ibv_ops_wr{};
    op_.wr_id = wr_id;
    op_.opcode = opcode;
    op_.flags = flags;
    op_.tm.unexpected_cnt = sw_unexpected_;
    op_.tm.handle = handle_;
    op_.tm.add.recv_wr_id = wr_id + 1000;
    op_.tm.add.sg_list = &sge_;
    op_.tm.add.num_sge = 1;
    op_.tm.add.tag = tag;
    op_.tm.add.mask = kAllBits;
    ibv_ops_wr* bad = nullptr;
    const int err = tm_->post_ops(&op_, &bad);
    if (err == 0 && opcode == IBV_WR_TAG_ADD) handle_ = op_.tm.handle;
    return err;
  }

  int ordinary_recv(size_t offset, uint32_t length, uint64_t wr_id) {
    ibv_sge sge{b.addr(offset), length, b.mr->key};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    return tm_->post_recv(&wr, &bad);
  }

  // Writes a TMH (tm_types.h: opcode, reserved, __be32 app_ctx, __be64 tag) at
  // `offset` of a's memory, followed by `payload` bytes of a pattern.
  void write_tmh(size_t offset, uint8_t opcode, uint64_t tag, uint32_t app_ctx) {
    uint8_t* p = a.mem.data() + offset;
    std::memset(p, 0, kTmhBytes);
    p[0] = opcode;
    for (int i = 0; i < 4; ++i) p[4 + i] = uint8_t(app_ctx >> (24 - 8 * i));
    for (int i = 0; i < 8; ++i) p[8 + i] = uint8_t(tag >> (56 - 8 * i));
  }
  void write_rvh(size_t offset, uint64_t va, uint32_t rkey, uint32_t len) {
    uint8_t* p = a.mem.data() + offset + kTmhBytes;
    for (int i = 0; i < 8; ++i) p[i] = uint8_t(va >> (56 - 8 * i));
    for (int i = 0; i < 4; ++i) p[8 + i] = uint8_t(rkey >> (24 - 8 * i));
    for (int i = 0; i < 4; ++i) p[12 + i] = uint8_t(len >> (24 - 8 * i));
  }

  int send(size_t offset, uint32_t length, uint64_t wr_id) {
    ibv_sge sge{a.addr(offset), length, a.mr->key};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_send_wr* bad = nullptr;
    return sender_->post_send(&wr, &bad);
  }

  // The TM SRQ's next completion, waiting for it (a hang guard, not a timing).
  Completion next() {
    Completion c{};
    EXPECT_TRUE(run_until([&] { return b.rcq->depth() > 0; })) << "no completion";
    if (!b.rcq->pop(c)) c.wc.status = IBV_WC_GENERAL_ERR;
    return c;
  }

  static constexpr uint32_t kTags = 4;
  Srq* tm_ = nullptr;
  Qp* sender_ = nullptr;
  Qp* receiver_ = nullptr;
  ibv_sge sge_{};
  ibv_ops_wr op_{};
  uint32_t handle_ = 0;
  uint32_t sw_unexpected_ = 0;
};

// An EAGER message matching a posted tag: the payload after the TMH lands in the
// tagged buffer; one completion with TM_MATCH and TM_DATA_VALID names the tag's
// recv_wr_id, the TMH's tag and app_ctx (ibv_wc_read_tm_info(3)).
TEST_P(TmTest, EagerMatchPlacesThePayloadAfterTheTmh) {
  ASSERT_EQ(op(IBV_WR_TAG_ADD, 1, 0x1234, 8192, 1024), 0);
  Completion c = next();
  EXPECT_EQ(c.wc.opcode, IBV_WC_TM_ADD);
  EXPECT_EQ(c.wc.wr_id, 1u);
  EXPECT_EQ(c.wc.wc_flags, 0u);
  fill(a, 0, 600, 3);
  write_tmh(0, IBV_TMH_EAGER, 0x1234, 77);
  ASSERT_EQ(send(0, 600, 5), 0);
  c = next();
  EXPECT_EQ(c.wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(c.wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(c.wc.wr_id, 1001u);
  EXPECT_EQ(c.wc.wc_flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(c.wc.byte_len, 600u - kTmhBytes);
  EXPECT_EQ(c.wc.qp_num, receiver_->qpn());
  EXPECT_EQ(c.tm.tag, 0x1234u);
  EXPECT_EQ(c.tm.priv, 77u);
  EXPECT_TRUE(same(a, kTmhBytes, b, 8192, 600 - kTmhBytes));
  EXPECT_EQ(tm_->tags()->match(0x1234), std::nullopt) << "a matched tag is consumed";
}

// tag_matching.md: a message of several packets completes its match at once and
// its data at the end: two completions for the same recv_wr_id.
TEST_P(TmTest, EagerOfSeveralPacketsCompletesMatchThenData) {
  ASSERT_EQ(op(IBV_WR_TAG_ADD, 1, 9, 16384, 4096, 0), 0);  // unsignaled: no completion
  fill(a, 0, 3000, 4);
  write_tmh(0, IBV_TMH_EAGER, 9, 5);
  ASSERT_EQ(send(0, 3000, 5), 0);  // three packets at MTU 1024
  Completion match = next();
  EXPECT_EQ(match.wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(match.wc.wr_id, 1001u);
  EXPECT_EQ(match.wc.wc_flags, unsigned(IBV_WC_TM_MATCH));
  EXPECT_EQ(match.tm.tag, 9u);
  Completion data = next();
  EXPECT_EQ(data.wc.wr_id, 1001u);
  EXPECT_EQ(data.wc.wc_flags, unsigned(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(data.wc.byte_len, 3000u - kTmhBytes);
  EXPECT_TRUE(same(a, kTmhBytes, b, 16384, 3000 - kTmhBytes));
}

// No armed tag matches: the whole message, TMH included, goes to an ordinary WQE
// and completes as IBV_WC_TM_RECV without flags (mlx5). Tags added before software
// reports it are not matched (tag_matching.md), but an older tag still is; their
// ADD completions ask for a SYNC, after which the newer tag matches too.
TEST_P(TmTest, UnexpectedMessageHoldsNewTagsUntilSync) {
  ASSERT_EQ(ordinary_recv(0, 1024, 50), 0);
  ASSERT_EQ(ordinary_recv(1024, 1024, 51), 0);
  ASSERT_EQ(op(IBV_WR_TAG_ADD, 1, 1, 8192, 1024, 0), 0);
  fill(a, 0, 100, 1);
  write_tmh(0, IBV_TMH_EAGER, 2, 0);
  ASSERT_EQ(send(0, 100, 5), 0);
  Completion c = next();
  EXPECT_EQ(c.wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(c.wc.wr_id, 50u);
  EXPECT_EQ(c.wc.wc_flags, 0u);
  EXPECT_EQ(c.wc.byte_len, 100u);
  EXPECT_EQ(c.tm.tag, 0u);
  EXPECT_TRUE(same(a, 0, b, 0, 100));
  EXPECT_EQ(tm_->tags()->unexpected(), 1u);

  ASSERT_EQ(op(IBV_WR_TAG_ADD, 2, 2, 12288, 1024), 0);  // software has not seen it yet
  c = next();
  EXPECT_EQ(c.wc.opcode, IBV_WC_TM_ADD);
  EXPECT_EQ(c.wc.wc_flags, unsigned(IBV_WC_TM_SYNC_REQ));
  ASSERT_EQ(send(0, 100, 6), 0);  // tag 2 again: the new entry is not armed
  c = next();
  EXPECT_EQ(c.wc.wr_id, 51u) << "unexpected again";
  write_tmh(0, IBV_TMH_EAGER, 1, 0);
  ASSERT_EQ(send(0, 100, 7), 0);  // tag 1 was added in sync: it matches
  c = next();
  EXPECT_EQ(c.wc.wr_id, 1001u);
  EXPECT_EQ(c.wc.wc_flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));

  sw_unexpected_ = 2;
  ASSERT_EQ(op(IBV_WR_TAG_SYNC, 27, 0, 0, 0, IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC), 0);
  c = next();
  EXPECT_EQ(c.wc.opcode, IBV_WC_TM_SYNC);
  EXPECT_EQ(c.wc.wr_id, 27u);
  EXPECT_EQ(c.wc.wc_flags, 0u) << "in sync";
  write_tmh(0, IBV_TMH_EAGER, 2, 0);
  ASSERT_EQ(send(0, 100, 8), 0);
  c = next();
  EXPECT_EQ(c.wc.wr_id, 1002u) << "armed by the SYNC";
  EXPECT_EQ(c.tm.tag, 2u);
}

// IBV_TMH_NO_TAG: delivered whole to an ordinary WQE as IBV_WC_TM_NO_TAG; it is
// not unexpected, so matching goes on and nothing asks for a SYNC.
TEST_P(TmTest, NoTagIsDeliveredWholeAndNotCounted) {
  ASSERT_EQ(ordinary_recv(0, 1024, 50), 0);
  ASSERT_EQ(op(IBV_WR_TAG_ADD, 1, 0x1234, 8192, 1024, 0), 0);
  fill(a, 0, 64, 2);
  write_tmh(0, IBV_TMH_NO_TAG, 0x1234, 0);
  ASSERT_EQ(send(0, 64, 5), 0);
  Completion c = next();
  EXPECT_EQ(c.wc.opcode, IBV_WC_TM_NO_TAG);
  EXPECT_EQ(c.wc.wr_id, 50u);
  EXPECT_EQ(c.wc.byte_len, 64u);
  EXPECT_TRUE(same(a, 0, b, 0, 64));
  EXPECT_EQ(tm_->tags()->unexpected(), 0u);
  EXPECT_TRUE(tm_->tags()->in_sync());
  EXPECT_NE(tm_->tags()->match(0x1234), std::nullopt) << "the tag is still there";
}

// A matched rendezvous request: the match completes at once; the receiver READs
// the sender's buffer (the RVH's va, rkey, len) into the tagged buffer through the
// QP's send queue (the application gave it no send WQEs), completes the data, and
// sends a FIN (the TMH and RVH back, opcode IBV_TMH_FIN) to the sender's receive
// queue.
TEST_P(TmTest, RendezvousReadsTheSendersBufferAndSendsAFin) {
  ASSERT_EQ(op(IBV_WR_TAG_ADD, 1, 42, 16384, 8192, 0), 0);
  fill(a, 32768, 5000, 7);  // the rendezvous payload
  write_tmh(0, IBV_TMH_RNDV, 42, 99);
  write_rvh(0, a.addr(32768), a.mr->key, 5000);
  ibv_sge fin_sge{a.addr(65536), 64, a.mr->key};
  ibv_recv_wr fin_wr{};
  fin_wr.wr_id = 600;
  fin_wr.sg_list = &fin_sge;
  fin_wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(sender_->post_recv(&fin_wr, &bad), 0);
  ASSERT_EQ(send(0, 64, 5), 0);
  Completion match = next();
  EXPECT_EQ(match.wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(match.wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(match.wc.wr_id, 1001u);
  EXPECT_EQ(match.wc.wc_flags, unsigned(IBV_WC_TM_MATCH));
  EXPECT_EQ(match.tm.tag, 42u);
  EXPECT_EQ(match.tm.priv, 99u);
  Completion data = next();
  EXPECT_EQ(data.wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(data.wc.wr_id, 1001u);
  EXPECT_EQ(data.wc.wc_flags, unsigned(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(data.wc.byte_len, 5000u);
  EXPECT_TRUE(same(a, 32768, b, 16384, 5000));
  std::vector<ibv_wc> fin;
  ASSERT_TRUE(run_until([&] {
    for (const ibv_wc& wc : poll(a.rcq)) fin.push_back(wc);
    return !fin.empty();
  }));
  EXPECT_EQ(fin[0].wr_id, 600u);
  EXPECT_EQ(fin[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(fin[0].byte_len, kTmhBytes + kRvhBytes);
  EXPECT_EQ(a.mem[65536], IBV_TMH_FIN);
  EXPECT_EQ(std::memcmp(&a.mem[65536 + 1], &a.mem[1], kTmhBytes + kRvhBytes - 1), 0);
  EXPECT_TRUE(poll(b.scq).empty()) << "the TM SRQ's READ and FIN complete nothing there";
}

// tag_matching.md: a tagged buffer too small for the rendezvous data gets the TMH
// and RVH, and completes with IBV_WC_TM_RNDV_INCOMPLETE (the match is done).
TEST_P(TmTest, RendezvousIntoASmallBufferIsIncomplete) {
  ASSERT_EQ(op(IBV_WR_TAG_ADD, 1, 42, 16384, 100, 0), 0);
  write_tmh(0, IBV_TMH_RNDV, 42, 3);
  write_rvh(0, a.addr(32768), a.mr->key, 5000);
  ASSERT_EQ(send(0, 32, 5), 0);
  Completion c = next();
  EXPECT_EQ(c.wc.status, IBV_WC_TM_RNDV_INCOMPLETE);
  EXPECT_EQ(c.wc.wr_id, 1001u);
  EXPECT_EQ(c.wc.wc_flags, unsigned(IBV_WC_TM_MATCH));
  EXPECT_EQ(c.wc.byte_len, 32u);
  EXPECT_TRUE(same(a, 0, b, 16384, 32));
}

// An unexpected message finding no ordinary WQE is an RNR NAK; the retry after a
// receive is posted delivers it, counted once.
TEST_P(TmTest, UnexpectedWithoutAnOrdinaryWqeWaitsForOne) {
  write_tmh(0, IBV_TMH_EAGER, 3, 0);
  ASSERT_EQ(send(0, 40, 5), 0);
  pump();
  EXPECT_EQ(b.rcq->depth(), 0u);
  EXPECT_GT(b.counters().rnr_naks_sent.load(), 0u);
  ASSERT_EQ(ordinary_recv(0, 1024, 50), 0);
  Completion c = next();
  EXPECT_EQ(c.wc.wr_id, 50u);
  EXPECT_EQ(tm_->tags()->unexpected(), 1u);
}

// ibv_post_srq_ops(3) errors: DEL of a handle whose entry is gone (consumed or
// deleted) completes with IBV_WC_TM_ERR even unsignaled; a handle that never was
// one, an unknown opcode or flag, too many SGEs are EINVAL; a full list and more
// operations in one post than max_ops are ENOMEM, naming the operation refused.
TEST_P(TmTest, ListOperationErrors) {
  ASSERT_EQ(op(IBV_WR_TAG_ADD, 1, 5, 8192, 64, 0), 0);
  ASSERT_EQ(op(IBV_WR_TAG_DEL, 2), 0);
  Completion c = next();
  EXPECT_EQ(c.wc.opcode, IBV_WC_TM_DEL);
  EXPECT_EQ(c.wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(op(IBV_WR_TAG_DEL, 3, 0, 0, 0, 0), 0);  // deleted already, unsignaled
  c = next();
  EXPECT_EQ(c.wc.wr_id, 3u);
  EXPECT_EQ(c.wc.status, IBV_WC_TM_ERR);
  handle_ = kTags;
  EXPECT_EQ(op(IBV_WR_TAG_DEL, 4), EINVAL);
  EXPECT_EQ(op(ibv_ops_wr_opcode(7), 4), EINVAL);
  EXPECT_EQ(op(IBV_WR_TAG_SYNC, 4, 0, 0, 0, 1 << 5), EINVAL);
  sge_ = ibv_sge{};
  op_.tm.add.num_sge = int(b.device->limits().max_tm_sge) + 1;
  ibv_ops_wr* bad = nullptr;
  op_.opcode = IBV_WR_TAG_ADD;
  op_.flags = 0;
  EXPECT_EQ(tm_->post_ops(&op_, &bad), EINVAL);
  EXPECT_EQ(bad, &op_);
  for (uint32_t i = 0; i < kTags; ++i) ASSERT_EQ(op(IBV_WR_TAG_ADD, 10 + i, i, 0, 8, 0), 0);
  EXPECT_EQ(op(IBV_WR_TAG_ADD, 20, 99, 0, 8, 0), ENOMEM) << "the list is full";
  // Five SYNCs in one post: the fifth is beyond max_ops (4).
  ibv_ops_wr chain[5]{};
  for (int i = 0; i < 5; ++i) {
    chain[i].opcode = IBV_WR_TAG_SYNC;
    chain[i].next = i < 4 ? &chain[i + 1] : nullptr;
  }
  EXPECT_EQ(tm_->post_ops(chain, &bad), ENOMEM);
  EXPECT_EQ(bad, &chain[4]);
  EXPECT_EQ(b.rcq->depth(), 0u) << "nothing signaled, nothing failed";
}

// A consumed tag's handle: DEL finds it gone (IBV_WC_TM_ERR), as
// ibv_post_srq_ops(3) says of "concurrent tag consumption".
TEST_P(TmTest, DelOfAConsumedTagIsTmErr) {
  ASSERT_EQ(op(IBV_WR_TAG_ADD, 1, 5, 8192, 64, 0), 0);
  write_tmh(0, IBV_TMH_EAGER, 5, 0);
  ASSERT_EQ(send(0, 16, 5), 0);
  EXPECT_EQ(next().wc.wc_flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  ASSERT_EQ(op(IBV_WR_TAG_DEL, 2), 0);
  Completion c = next();
  EXPECT_EQ(c.wc.opcode, IBV_WC_TM_DEL);
  EXPECT_EQ(c.wc.status, IBV_WC_TM_ERR);
}

// Creation and attachment: a TM SRQ needs its CQ and a tag list within tm_caps;
// list operations on a basic SRQ are EINVAL (mlx5); only RC QPs attach to one.
TEST_P(TmTest, CreationAndAttachmentErrors) {
  int err = 0;
  SrqInit init;
  init.type = IBV_SRQT_TM;
  init.attr = ibv_srq_attr{4, 1, 0};
  init.tm = ibv_tm_cap{4, 4};
  EXPECT_EQ(b.device->create_srq(b.pd, init, err), nullptr);
  EXPECT_EQ(err, EINVAL) << "no CQ";
  init.cq = b.rcq;
  init.tm = ibv_tm_cap{b.device->limits().max_tm_tags + 1, 4};
  EXPECT_EQ(b.device->create_srq(b.pd, init, err), nullptr);
  EXPECT_EQ(err, EINVAL) << "more tags than tm_caps";
  init.tm = ibv_tm_cap{4, 0};
  EXPECT_EQ(b.device->create_srq(b.pd, init, err), nullptr);
  EXPECT_EQ(err, EINVAL) << "no operation possible";

  SrqInit basic;
  basic.attr = ibv_srq_attr{4, 1, 0};
  Srq* plain = b.device->create_srq(b.pd, basic, err);
  ASSERT_NE(plain, nullptr);
  ibv_ops_wr sync{};
  sync.opcode = IBV_WR_TAG_SYNC;
  ibv_ops_wr* bad = nullptr;
  EXPECT_EQ(plain->post_ops(&sync, &bad), EINVAL);
  EXPECT_EQ(bad, &sync);
  EXPECT_EQ(b.device->destroy_srq(plain), 0);

  QpInit qi;
  qi.type = IBV_QPT_UD;
  qi.send_cq = b.scq;
  qi.recv_cq = b.rcq;
  qi.cap = ibv_qp_cap{1, 0, 1, 0, 0};
  qi.srq = tm_;
  EXPECT_EQ(b.device->create_qp(b.pd, qi, err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

// The TM SRQ's send queue slots are its own: the application's max_send_wr stays
// what it asked for (here 1, the least a QP has).
TEST_P(TmTest, TheApplicationKeepsItsOwnSendQueueSize) {
  ibv_sge sge{b.addr(0), 8, b.mr->key};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr second = wr;
  wr.next = &second;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(receiver_->post_send(&wr, &bad), ENOMEM);
  EXPECT_EQ(bad, &second);
}

INSTANTIATE_TEST_SUITE_P(Paths, TmTest, ::testing::Values(TestPath::kWire, TestPath::kHost,
                                           TestPath::kSharedAddress),
                         path_name);

}  // namespace
}  // namespace softrdma::engine::testing
