// rsockets' data path (docs/decisions/rsockets.md): the endpoint an rsocket
// connects with, the completions that carry the peer's messages, and the credit
// protocol of rdma-core's rsocket.c — a receiver advertises half of its receive
// buffer at a time (an SGE RDMA-written into one of the sender's two credit
// slots) and the number of messages it may still take (kOpSgl). On iWARP each
// message is a SEND instead of an immediate (RS_OPT_MSG_SEND, rsockets.md).
#include <byteswap.h>
#include <endian.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "rdmacm/rsocket.h"

namespace softrdma::rdmacm::rsock {
namespace {

constexpr uint32_t kQpMinSize = 16;
constexpr uint32_t kQpMaxSize = 0xfffe;

uint8_t* alloc_buffer(size_t len) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, std::max<size_t>(len, 64)) != 0) return nullptr;
  std::memset(p, 0, len);
  return static_cast<uint8_t*>(p);
}

// rs_value_to_scale / rs_scale_to_value: the iomap table's size in 8 bits.
int value_to_scale(int value, int bits) {
  return value <= (1 << (bits - 1)) ? value : (1 << (bits - 1)) | (value >> bits);
}
int scale_to_value(int value, int bits) {
  return value <= (1 << (bits - 1)) ? value : (value & ~(1 << (bits - 1))) << bits;
}

int post_send(RSocket& s, ibv_send_wr& wr) {
  ibv_send_wr* bad = nullptr;
  int err = ibv_post_send(s.id->qp, &wr, &bad);
  return err == 0 ? 0 : fail(err);
}

// RDMA WRITE WITH IMMEDIATE consumes a WR with no SGE; a message SEND lands in
// the WR's own 4-byte slot, named by its wr_id (rs_post_recv). Slots cycle with
// the WRs: one is posted again only after its message was read.
int post_recv(RSocket& s) {
  ibv_recv_wr wr{};
  ibv_sge sge{};
  wr.wr_id = kRecvFlag;
  if (s.msg_send) {
    wr.wr_id |= s.rbuf_msg_index;
    sge = {uint64_t(uintptr_t(s.recv_msgs() + s.rbuf_msg_index)), kMsgSize, s.rmr->lkey};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    s.rbuf_msg_index = (s.rbuf_msg_index + 1) % s.rq_size;
  }
  ibv_recv_wr* bad = nullptr;
  int err = ibv_post_recv(s.id->qp, &wr, &bad);
  return err == 0 ? 0 : fail(err);
}

int clamp_queue(uint32_t size, uint32_t device_max) {
  return int(std::clamp(size, kQpMinSize, std::min(device_max, kQpMaxSize)));
}

int create_buffers(RSocket& s) {
  ibv_pd* pd = s.id->pd;
  const size_t slen = s.sbuf_size + sizeof(WireSge) * kCtrlSlots;
  const size_t tlen = sizeof(WireSge) * kSglSize + sizeof(WireIomap) * s.target_iomap_size;
  const size_t rlen = s.rbuf_size + (s.msg_send ? size_t(s.rq_size) * kMsgSize : 0);
  s.sbuf = alloc_buffer(slen);
  s.targets = alloc_buffer(tlen);
  s.rbuf = alloc_buffer(rlen);
  if (s.sbuf == nullptr || s.targets == nullptr || s.rbuf == nullptr) return ENOMEM;
  constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  s.smr = ibv_reg_mr(pd, s.sbuf, slen, IBV_ACCESS_LOCAL_WRITE);
  s.target_mr = s.smr ? ibv_reg_mr(pd, s.targets, tlen, kRemote) : nullptr;
  s.rmr = s.target_mr ? ibv_reg_mr(pd, s.rbuf, rlen, kRemote) : nullptr;
  if (s.rmr == nullptr) return errno != 0 ? errno : ENOMEM;
  s.sbuf_bytes_avail = s.sbuf_size;
  s.rbuf_free_offset = s.rbuf_bytes_avail = s.rbuf_size / 2;
  s.sqe_avail = s.sq_size - s.ctrl_max_seqno;
  s.rbuf_msg_index = 0;
  s.rseq_comp = uint16_t(s.rq_size / 2);
  s.rmsg.assign(s.rq_size + 1, 0);
  return 0;
}

}  // namespace

// The writer's byte order to the peer's: swapped only for a big-endian peer.
WireSge to_peer(const RSocket& s, WireSge sge) {
  if (!s.swap_sgl) return sge;
  return {bswap_64(sge.addr), bswap_32(sge.key), bswap_32(sge.length)};
}

namespace {

int post_rdma_write(RSocket& s, ibv_wr_opcode opcode, uint32_t wr_id, ibv_sge* sgl, int nsge,
                    int flags, uint64_t addr, uint32_t rkey) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sgl;
  wr.num_sge = nsge;
  wr.opcode = opcode;
  wr.send_flags = flags;
  if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htobe32(wr_id);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  return post_send(s, wr);
}

}  // namespace

namespace {

// RS_OPT_MSG_SEND's message: a 4-byte inline SEND (the bytes are copied at the
// post, so `msg` may be a local).
int post_msg_send(RSocket& s, uint64_t wr_id, uint32_t msg) {
  ibv_sge sge{uint64_t(uintptr_t(&msg)), kMsgSize, 0};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_INLINE;
  return post_send(s, wr);
}

}  // namespace

// RDMA WRITE WITH IMMEDIATE: `msg` is both the immediate and the wr_id, so the
// completion says what was freed (rs_post_write_msg). With msg_send, a plain
// WRITE (wr_id `msg`) and then the message's SEND, which iWARP places after the
// WRITE's bytes (RFC 5040 §5.5: a SEND's completion follows earlier WRITEs'
// placement); the SEND's wr_id keeps the op but frees no bytes.
int post_write_msg(RSocket& s, ibv_sge* sgl, int nsge, uint32_t msg, int flags, uint64_t addr,
                   uint32_t rkey) {
  if (!s.msg_send)
    return post_rdma_write(s, IBV_WR_RDMA_WRITE_WITH_IMM, msg, sgl, nsge, flags, addr, rkey);
  if (post_rdma_write(s, IBV_WR_RDMA_WRITE, msg, sgl, nsge, flags, addr, rkey) != 0) return -1;
  return post_msg_send(s, msg_set(msg_op(msg), 0) | kMsgSendFlag, msg);
}

int post_write(RSocket& s, ibv_sge* sgl, int nsge, uint32_t wr_data, int flags, uint64_t addr,
               uint32_t rkey) {
  return post_rdma_write(s, IBV_WR_RDMA_WRITE, wr_data, sgl, nsge, flags, addr, rkey);
}

namespace {

// A message with no data: a zero-length WRITE WITH IMMEDIATE (IBA 9.4.3: no
// R_Key check for length 0), or with msg_send the SEND alone (rs_post_msg).
int post_msg(RSocket& s, uint32_t msg) {
  if (s.msg_send) return post_msg_send(s, msg, msg);
  return post_write_msg(s, nullptr, 0, msg, 0, 0, 0);
}

void send_credits(RSocket& s) {
  ++s.ctrl_seqno;
  s.rseq_comp = uint16_t(s.rseq_no + s.rq_size / 2);
  const uint32_t msg = msg_set(kOpSgl, uint32_t(s.rseq_no + s.rq_size) & 0x1fffffff);
  const uint32_t half = s.rbuf_size / 2;
  if (s.rbuf_bytes_avail < half) {
    post_msg(s, msg);
    return;
  }
  if (s.msg_send) ++s.ctrl_seqno;  // a WRITE and a SEND: two control WRs (rs_send_credits)
  // The next free half, in a control slot of the send buffer (not reused before
  // its completion: at most kCtrlSlots control messages are in flight).
  auto* slot = reinterpret_cast<WireSge*>(s.sbuf + s.sbuf_size) + (s.ctrl_seqno % kCtrlSlots);
  *slot = to_peer(s, WireSge{uint64_t(uintptr_t(s.rbuf + s.rbuf_free_offset)), s.rmr->rkey, half});
  ibv_sge sge{uint64_t(uintptr_t(slot)), sizeof(WireSge), s.smr->lkey};
  post_write_msg(s, &sge, 1, msg, 0, s.remote_sgl.addr + uint64_t(s.remote_sge) * sizeof(WireSge),
                 s.remote_sgl.key);
  s.rbuf_bytes_avail -= half;
  s.rbuf_free_offset = (s.rbuf_free_offset + half) % s.rbuf_size;
  s.remote_sge = (s.remote_sge + 1) % int(std::max<uint32_t>(s.remote_sgl.length, 1));
}

// A peer that broke the protocol: the stream ends with EPROTO rather than
// reading past what was written (rsockets.md "A peer that breaks the protocol").
void broken(RSocket& s) { break_stream(s, EPROTO); }

void on_recv(RSocket& s, uint32_t msg) {
  switch (msg_op(msg)) {
    case kOpSgl:
      s.sseq_comp = uint16_t(msg_data(msg));
      break;
    case kOpIomapSgl:  // the peer wrote an iomap entry; riowrite reads the table
      break;
    case kOpCtrl:
      if (msg_data(msg) == kCtrlDisconnect) {
        s.phase = Phase::kDisconnected;
        s.readable = s.writable = false;
      } else if (msg_data(msg) == kCtrlShutdown) {
        s.readable = false;  // the peer writes no more
        if (!s.writable) s.phase = Phase::kDisconnected;
      }
      break;
    case kOpData: {
      // A peer keeps to the credits it was given: no more messages than our
      // receive queue holds, none longer than the half buffer it may write.
      // One that does not has broken the stream; it ends with EPROTO rather
      // than reading past what was written.
      const uint32_t next_tail = (s.rmsg_tail + 1) % uint32_t(s.rmsg.size());
      if (next_tail == s.rmsg_head || msg_data(msg) > s.rbuf_size / 2) {
        broken(s);
        break;
      }
      s.rmsg[s.rmsg_tail] = msg_data(msg);
      s.rmsg_tail = next_tail;
      break;
    }
    default:
      break;
  }
}

void on_send(RSocket& s, const ibv_wc& wc) {
  const uint32_t msg = uint32_t(wc.wr_id);
  switch (msg_op(msg)) {
    case kOpSgl:
      ++s.ctrl_max_seqno;
      break;
    case kOpCtrl:
      ++s.ctrl_max_seqno;
      if (msg_data(msg) == kCtrlDisconnect) {
        s.phase = Phase::kDisconnected;
        s.readable = s.writable = false;
      }
      break;
    case kOpIomapSgl:
      ++s.sqe_avail;
      if ((wc.wr_id & kMsgSendFlag) == 0) s.sbuf_bytes_avail += sizeof(WireIomap);
      break;
    default:  // kOpData, kOpWrite: the bytes are the wr_id's data (0 for a message SEND)
      ++s.sqe_avail;
      s.sbuf_bytes_avail += msg_data(msg);
      break;
  }
  // A transfer (or keepalive) that failed: the peer is gone or unreachable
  // (IBV_WC_RETRY_EXC_ERR). rsocket.c says EIO in SO_ERROR and lets rrecv answer
  // 0; here the stream ends with ECONNRESET everywhere, so that a dead peer is
  // never taken for an orderly end of stream (rsockets.md).
  if (wc.status != IBV_WC_SUCCESS && s.connected()) break_stream(s, ECONNRESET);
}

// A receive flushed: the QP left RTS. After the peer's DREQ that is its close,
// as a TCP peer's FIN: what was received may be read, then rrecv answers 0. A QP
// that failed while the connection was up (the peer died: its retries or its
// liveness probe ran out) is a reset: ECONNRESET, as TCP's after a lost peer.
void end_by_flush(RSocket& s) {
  if (connection_lost(s.id)) return break_stream(s, ECONNRESET);
  s.phase = Phase::kDisconnected;
  s.readable = s.writable = false;
}

// The message a successful receive carries: the immediate of a WRITE WITH
// IMMEDIATE (a receive without one is ignored), or with msg_send the 4 bytes
// the peer's SEND put in the WR's slot. A SEND of another length is no
// rsockets message: the stream is broken.
bool take_msg(RSocket& s, const ibv_wc& wc, uint32_t& msg) {
  if (!s.msg_send) {
    msg = be32toh(wc.imm_data);
    return (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  }
  if (wc.opcode != IBV_WC_RECV || wc.byte_len != kMsgSize) {
    if (s.connected()) broken(s);
    return false;
  }
  std::memcpy(&msg, s.recv_msgs() + uint32_t(wc.wr_id) % s.rq_size, kMsgSize);
  return true;
}

}  // namespace

int setup_endpoint(RSocket& s) {
  ibv_device_attr dev{};
  if (ibv_query_device(s.id->verbs, &dev) != 0) return errno;
  s.sq_size = clamp_queue(s.sq_size, uint32_t(dev.max_qp_wr));
  s.rq_size = clamp_queue(s.rq_size, uint32_t(dev.max_qp_wr));
  // iWARP has no immediate data (post_send refuses WRITE WITH IMMEDIATE): as
  // rsocket.c's rs_create_ep, messages become inline SENDs of kMsgSize bytes.
  s.msg_send = s.id->verbs->device->transport_type == IBV_TRANSPORT_IWARP;
  if (s.msg_send) s.sq_inline = std::max(s.sq_inline, kMsgSize);
  s.cq_channel = ibv_create_comp_channel(s.id->verbs);
  if (s.cq_channel == nullptr) return errno;
  s.cq = ibv_create_cq(s.id->verbs, int(s.sq_size + s.rq_size), s.id, s.cq_channel, 0);
  if (s.cq == nullptr) return errno;
  ibv_qp_init_attr attr{};
  attr.qp_context = &s;
  attr.send_cq = attr.recv_cq = s.cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 1;
  attr.cap.max_send_wr = s.sq_size;
  attr.cap.max_recv_wr = s.rq_size;
  attr.cap.max_send_sge = 2;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = s.sq_inline;
  if (rdma_create_qp(s.id, nullptr, &attr) != 0) return errno;
  s.sq_inline = attr.cap.max_inline_data;
  if (s.msg_send && s.sq_inline < kMsgSize) return ENOTSUP;
  if (int err = create_buffers(s)) return err;
  for (uint32_t i = 0; i < s.rq_size; ++i)
    if (post_recv(s) != 0) return errno;
  return 0;
}

void free_endpoint(RSocket& s) {
  if (s.cq != nullptr && s.unacked_events != 0) ibv_ack_cq_events(s.cq, s.unacked_events);
  s.unacked_events = 0;
  if (s.id != nullptr && s.id->qp != nullptr) rdma_destroy_qp(s.id);
  for (IoMapping& m : s.iomaps)
    if (m.mr != nullptr) ibv_dereg_mr(m.mr);
  s.iomaps.clear();
  for (ibv_mr* mr : {s.smr, s.rmr, s.target_mr})
    if (mr != nullptr) ibv_dereg_mr(mr);
  s.smr = s.rmr = s.target_mr = nullptr;
  if (s.cq != nullptr) ibv_destroy_cq(s.cq);
  if (s.cq_channel != nullptr) ibv_destroy_comp_channel(s.cq_channel);
  s.cq = nullptr;
  s.cq_channel = nullptr;
  std::free(s.sbuf);
  std::free(s.rbuf);
  std::free(s.targets);
  s.sbuf = s.rbuf = s.targets = nullptr;
}

void format_conn_data(const RSocket& s, ConnData& c) {
  std::memset(&c, 0, sizeof c);
  c.version = 1;
  c.flags = kConnFlagIomap | (__BYTE_ORDER == __BIG_ENDIAN ? kConnFlagNet : 0);
  c.credits = htobe16(uint16_t(s.rq_size));
  c.target_iomap_size = uint8_t(value_to_scale(int(s.target_iomap_size), 8));
  c.target_sgl = {htobe64(uintptr_t(s.targets)), htobe32(s.target_mr->rkey), htobe32(kSglSize)};
  c.data_buf = {htobe64(uintptr_t(s.rbuf)), htobe32(s.rmr->rkey), htobe32(s.rbuf_size / 2)};
}

void save_conn_data(RSocket& s, const ConnData& c) {
  s.remote_sgl = {be64toh(c.target_sgl.addr), be32toh(c.target_sgl.key),
                  be32toh(c.target_sgl.length)};
  s.remote_sge = 1;
  s.swap_sgl = ((c.flags & kConnFlagNet) != 0) != (__BYTE_ORDER == __BIG_ENDIAN);
  if ((c.flags & kConnFlagIomap) != 0) {
    s.remote_iomap = {s.remote_sgl.addr + sizeof(WireSge) * s.remote_sgl.length, s.remote_sgl.key,
                      uint32_t(scale_to_value(c.target_iomap_size, 8))};
  }
  s.target_sgl()[0] = {be64toh(c.data_buf.addr), be32toh(c.data_buf.key),
                       be32toh(c.data_buf.length)};
  s.sseq_comp = be16toh(c.credits);
}

int poll_cq(RSocket& s) {
  ibv_wc wcs[16];
  int received = 0, n = 0;
  while ((n = ibv_poll_cq(s.cq, 16, wcs)) > 0) {
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if ((wc.wr_id & kRecvFlag) == 0) {
        on_send(s, wc);
        continue;
      }
      if (wc.status != IBV_WC_SUCCESS) {
        if (s.connected()) end_by_flush(s);
        continue;
      }
      ++received;
      uint32_t msg = 0;
      if (take_msg(s, wc, msg)) on_recv(s, msg);
    }
  }
  if (n < 0) return fail(EIO);
  if (!s.connected()) return 0;
  while (received-- > 0) {
    if (post_recv(s) != 0) {
      const int err = errno;
      break_stream(s, err);
      return fail(err);
    }
  }
  return 0;
}

// rs_give_credits: with msg_send a credit may take two control WRs (a WRITE and
// a SEND), so two slots must be free (rs_2ctrl_avail), whichever is sent.
void update_credits(RSocket& s) {
  const bool half_free = s.rbuf_bytes_avail >= s.rbuf_size / 2;
  const bool seq_due = int16_t(uint16_t(s.rseq_no - s.rseq_comp)) >= 0;
  const bool slots = int32_t(s.ctrl_seqno + s.msg_wrs() - 1 - s.ctrl_max_seqno) < 0;
  if ((half_free || seq_due) && slots && s.connected()) send_credits(s);
}

// rs_can_send: send queue entries (two with msg_send), buffer space, a message
// the peer's receive queue can take, and room in the peer's receive buffer.
bool can_send(const RSocket& s) {
  return s.sqe_avail >= s.msg_wrs() && s.sbuf_bytes_avail >= kSndLowat &&
         s.sseq_no != s.sseq_comp &&
         static_cast<volatile WireSge*>(s.target_sgl())[s.target_sge].length != 0;
}

bool all_sends_done(const RSocket& s) {
  return (s.ctrl_max_seqno - s.ctrl_seqno) + s.sqe_avail == s.sq_size;
}

int post_ctrl(RSocket& s, uint32_t ctrl) {
  ++s.ctrl_seqno;
  return post_msg(s, msg_set(kOpCtrl, ctrl));
}

// KEEPALIVE: a zero-length WRITE WITH IMMEDIATE (rsockets.md "Keepalive"). With
// msg_send a zero-length plain RDMA WRITE, as rsocket.c's tcp_svc sends: a SEND
// would take one of the peer's receives that no credit accounts for. Either
// way only the transport's acknowledgement matters.
int post_keepalive(RSocket& s) {
  if (!s.msg_send) return post_ctrl(s, kCtrlKeepalive);
  ++s.ctrl_seqno;
  return post_write(s, nullptr, 0, msg_set(kOpCtrl, kCtrlKeepalive), 0, 0, 0);
}

void arm_cq(RSocket& s) {
  ibv_req_notify_cq(s.cq, 0);
  s.cq_armed = true;
}

// Waits for the CQ's notification without the socket's lock, so that another
// thread's rsend or rrecv goes on meanwhile; one waiter at a time.
int take_cq_event(RSocket& s, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  int ret = 0;
  {
    std::lock_guard wait(s.wait_mutex);
    bool armed;
    {
      std::lock_guard relock(s.mutex);
      armed = s.cq_armed;
    }
    if (armed) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      ret = ibv_get_cq_event(s.cq_channel, &cq, &context);
      std::lock_guard relock(s.mutex);
      if (ret == 0) {
        s.cq_armed = false;
        if (++s.unacked_events >= 64) {
          ibv_ack_cq_events(s.cq, s.unacked_events);
          s.unacked_events = 0;
        }
      }
    }
  }
  lock.lock();
  return ret;
}

}  // namespace softrdma::rdmacm::rsock
