// rsockets (rsocket(7)) over softrdma's rdma_cm and verbs: stream sockets whose
// bytes travel as RDMA WRITE WITH IMMEDIATE into the peer's receive buffer (on
// iWARP, which has no immediate data, an RDMA WRITE then a 4-byte SEND), with
// the wire protocol of rdma-core's librdmacm/rsocket.c so that either end
// may be rdma-core's (docs/decisions/rsockets.md has the protocol and what is
// simplified).
#pragma once

#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <fcntl.h>
#include <sys/socket.h>

#include <cerrno>

#include <cstdint>
#include <mutex>
#include <vector>

namespace softrdma::rdmacm::rsock {

// --- The wire protocol (rdma-core rsocket.c, version 1) ---------------------
// The 32-bit immediate of every message: bits 31-29 the operation, 28-0 its
// data (bytes written, credits granted, an iomap index or a control code).
enum Op : uint32_t {
  kOpData = 0,       // data written into the peer's receive buffer; data = bytes
  kOpWrite = 2,      // riowrite: a plain RDMA WRITE, never on the wire as an op
  kOpSgl = 4,        // credits: data = the sequence number the peer may send up to
  kOpIomapSgl = 6,   // an iomap entry was written at index `data`
  kOpCtrl = 7,       // control: data = kCtrlDisconnect / kCtrlShutdown
};
enum Ctrl : uint32_t { kCtrlDisconnect = 0, kCtrlKeepalive = 1, kCtrlShutdown = 2 };
inline uint32_t msg_set(uint32_t op, uint32_t data) { return (op << 29) | data; }
inline uint32_t msg_op(uint32_t msg) { return msg >> 29; }
inline uint32_t msg_data(uint32_t msg) { return msg & 0x1fffffff; }

// A buffer the peer may write (rs_sge): in the connection data big-endian,
// written by RDMA in the writer's byte order (both ends little-endian here;
// RS_CONN_FLAG_NET tells a big-endian peer to swap).
struct WireSge {
  uint64_t addr;
  uint32_t key;
  uint32_t length;
};
static_assert(sizeof(WireSge) == 16);
struct WireIomap {
  uint64_t offset;
  WireSge sge;
};
static_assert(sizeof(WireIomap) == 24);

// The connection's private data (rs_conn_data), first in REQ and REP.
struct ConnData {
  uint8_t version;            // 1
  uint8_t flags;              // kConnFlagNet | kConnFlagIomap
  uint16_t credits;           // big-endian: the receive queue's depth
  uint8_t reserved[3];
  uint8_t target_iomap_size;  // scaled (rs_value_to_scale, 8 bits)
  WireSge target_sgl;         // where the peer writes credit SGEs (2 entries) and iomaps
  WireSge data_buf;           // the first half of the receive buffer
};
static_assert(sizeof(ConnData) == 40);
constexpr uint8_t kConnFlagNet = 1;
constexpr uint8_t kConnFlagIomap = 2;

constexpr int kSglSize = 2;          // RS_SGL_SIZE: credit SGEs alternate between 2 slots
constexpr uint32_t kCtrlSlots = 4;   // RS_QP_CTRL_SIZE: control messages in flight
constexpr uint32_t kSndLowat = 2048; // RS_SNDLOWAT
constexpr uint32_t kMaxTransfer = 65536;
constexpr uint32_t kFirstTransfer = 2048;
constexpr uint64_t kRecvFlag = uint64_t{1} << 63;
// RS_OPT_MSG_SEND (iWARP: RFC 5040 has no immediate data): each message is a
// SEND of these 4 bytes (the sender's byte order, as rsocket.c) into a slot
// after the peer's receive ring. A SEND that follows a WRITE carries this flag
// in its wr_id (RS_WR_ID_FLAG_MSG_SEND): its completion frees no buffer.
constexpr uint32_t kMsgSize = sizeof(uint32_t);
constexpr uint64_t kMsgSendFlag = uint64_t{1} << 62;

// --- The socket -----------------------------------------------------------------
enum class Phase {
  kInit,
  kBound,
  kListening,
  kResolvingAddr,
  kResolvingRoute,
  kConnecting,
  kAccepting,
  kConnected,
  kConnectError,
  kDisconnected,  // the peer's DISCONNECT, or its QP went away
  kError,
};

struct IoMapping {
  uint64_t offset = 0;
  ibv_mr* mr = nullptr;
  int index = -1;     // slot in the peer's iomap table
  bool sent = false;  // written to the peer
};

struct RSocket {
  int fd = -1;  // the rsocket's number: its rdma_cm channel's fd, as rdma-core does
  std::mutex mutex;       // everything below
  std::mutex wait_mutex;  // one thread at a time blocks on the CQ channel
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  int domain = AF_INET;
  Phase phase = Phase::kInit;
  bool readable = false, writable = false;
  int err = 0;        // SO_ERROR: read and cleared by rgetsockopt
  // kError: why the stream broke (ECONNRESET, EPROTO ...). Unlike `err` it is
  // never cleared: rrecv and rsend answer -1 with it on every call, also after
  // SO_ERROR was read (rsockets.md "A stream that broke").
  int stream_error = 0;
  int fs_flags = 0;   // F_GETFL/F_SETFL: O_NONBLOCK
  int fd_flags = 0;   // F_GETFD/F_SETFD
  bool nodelay = false, reuseaddr = false, oobinline = false, linger_off = true;
  // SO_KEEPALIVE and TCP_KEEPIDLE (seconds; 0 until set: then the host's
  // tcp_keepalive_time), rsocket_keepalive.cc.
  bool keepalive = false;
  unsigned keepalive_time = 0;

  // Sizes (SO_SNDBUF/SO_RCVBUF ×2 as Linux reports, SOL_RDMA), fixed at connect.
  uint32_t sbuf_size = 1 << 17, rbuf_size = 1 << 17;
  uint32_t sq_size = 384, rq_size = 384, sq_inline = 64;
  uint32_t target_iomap_size = 0;

  // Verbs resources, once connecting or accepting.
  ibv_comp_channel* cq_channel = nullptr;
  ibv_cq* cq = nullptr;
  bool cq_armed = false;
  unsigned unacked_events = 0;
  // RS_OPT_MSG_SEND: set on an iWARP device (rs_create_ep); the next message slot
  // a receive WR is posted with.
  bool msg_send = false;
  uint32_t rbuf_msg_index = 0;
  uint8_t* sbuf = nullptr;  // sbuf_size of data ring, then kCtrlSlots WireSge
  uint8_t* rbuf = nullptr;  // rbuf_size of data ring, then (msg_send) rq_size messages
  uint8_t* targets = nullptr;  // kSglSize WireSge then target_iomap_size WireIomap
  ibv_mr *smr = nullptr, *rmr = nullptr, *target_mr = nullptr;

  // Sending.
  uint32_t sqe_avail = 0, sbuf_bytes_avail = 0, sbuf_head = 0;
  uint16_t sseq_no = 0, sseq_comp = 0;
  int target_sge = 0;
  uint32_t ctrl_seqno = 0, ctrl_max_seqno = kCtrlSlots;
  WireSge remote_sgl{};    // the peer's credit slots
  bool swap_sgl = false;   // the peer's byte order differs (RS_CONN_FLAG_NET)
  int remote_sge = 1;
  WireSge remote_iomap{};  // the peer's iomap table (length = entries)
  std::vector<IoMapping> iomaps;

  // Receiving: (op,len) of data written, oldest at rmsg_head.
  std::vector<uint32_t> rmsg;
  uint32_t rmsg_head = 0, rmsg_tail = 0;
  uint32_t rbuf_offset = 0, rbuf_free_offset = 0, rbuf_bytes_avail = 0;
  uint16_t rseq_no = 0, rseq_comp = 0;

  bool opening() const { return phase >= Phase::kResolvingAddr && phase <= Phase::kAccepting; }
  bool connected() const { return phase == Phase::kConnected; }
  WireSge* target_sgl() const { return reinterpret_cast<WireSge*>(targets); }
  WireIomap* target_iomap() const {
    return reinterpret_cast<WireIomap*>(targets + sizeof(WireSge) * kSglSize);
  }
  uint32_t* recv_msgs() const { return reinterpret_cast<uint32_t*>(rbuf + rbuf_size); }
  // Send queue entries one message takes: with msg_send a WRITE and a SEND.
  uint32_t msg_wrs() const { return msg_send ? 2 : 1; }
};

// rsocket_table.cc: the rsockets by number.
RSocket* lookup(int fd);
void insert(RSocket* s);
void remove(RSocket* s);

// rsocket_conn.cc
int drive_connect(RSocket& s, bool nonblock);  // 0, or -1 with errno (EINPROGRESS)
// rsocket_data.cc
int setup_endpoint(RSocket& s);                 // QP, CQ, buffers; errno or 0
void format_conn_data(const RSocket& s, ConnData& c);
void save_conn_data(RSocket& s, const ConnData& c);
void free_endpoint(RSocket& s);
// Processes completions until `test` holds; blocking waits on the CQ channel.
// 0, or -1 with errno (EWOULDBLOCK when non-blocking).
template <typename Test>
int process_cq(RSocket& s, std::unique_lock<std::mutex>& lock, bool nonblock, Test test);
int poll_cq(RSocket& s);
void update_credits(RSocket& s);
bool can_send(const RSocket& s);
bool all_sends_done(const RSocket& s);
int post_ctrl(RSocket& s, uint32_t ctrl);
int post_keepalive(RSocket& s);
int post_write_msg(RSocket& s, ibv_sge* sgl, int nsge, uint32_t msg, int flags, uint64_t addr,
                   uint32_t rkey);
int post_write(RSocket& s, ibv_sge* sgl, int nsge, uint32_t wr_data, int flags, uint64_t addr,
               uint32_t rkey);
WireSge to_peer(const RSocket& s, WireSge sge);
// rsocket_keepalive.cc: set and changed under the socket's lock; forget before
// the socket is freed, without its lock.
int set_keepalive(RSocket& s, bool on);
void set_keepalive_time(RSocket& s, unsigned seconds);
void forget_keepalive(RSocket& s);
// cm: the id's connection failed (its QP entered Error while established, or the
// agent ended it for that reason) rather than ended by a DREQ.
bool connection_lost(rdma_cm_id* id);
int take_cq_event(RSocket& s, std::unique_lock<std::mutex>& lock);
void arm_cq(RSocket& s);

// The stream broke: readable and writable no more, SO_ERROR and every later
// rrecv/rsend say `err`.
inline void break_stream(RSocket& s, int err) {
  s.phase = Phase::kError;
  s.err = s.stream_error = err;
  s.readable = s.writable = false;
}

inline bool is_nonblocking(const RSocket& s, int flags) {
  return (s.fs_flags & O_NONBLOCK) != 0 || (flags & MSG_DONTWAIT) != 0;
}
inline int fail(int err) {
  errno = err;
  return -1;
}

// process_cq's body, here because it is a template.
template <typename Test>
int process_cq(RSocket& s, std::unique_lock<std::mutex>& lock, bool nonblock, Test test) {
  for (;;) {
    update_credits(s);
    int ret = poll_cq(s);
    if (test(s)) {
      update_credits(s);
      return 0;
    }
    if (ret != 0) return ret;
    if (nonblock) return fail(EWOULDBLOCK);
    if (!s.cq_armed) {
      arm_cq(s);  // then poll once more: a completion may have come before the arm
      continue;
    }
    update_credits(s);
    if (take_cq_event(s, lock) != 0 && errno != EAGAIN && errno != EINTR) return -1;
  }
}

}  // namespace softrdma::rdmacm::rsock
