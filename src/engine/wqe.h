// Work queue elements: what ibv_post_send / ibv_post_recv leave in a work queue,
// copied at post time (the application may reuse its ibv_*_wr at once), plus the
// requester's progress through the message.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

#include "engine/mw.h"
#include "wire/ip_udp.h"

namespace softrdma::engine {

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// A gather/scatter list: a view of `count` SGEs stored in the queue's SGE arena.
struct SgeList {
  Sge* sges = nullptr;
  uint32_t count = 0;
};

// Where a UD send goes: the AH's address, copied at post time (the application may
// destroy the AH once the post returned), and the DETH's remote QP and Q_Key.
struct UdAddress {
  wire::Gid dgid{};
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  uint8_t sgid_index = 0;
};

enum class SendState : uint8_t {
  kQueued,    // posted, no PSN yet
  kSending,   // PSNs assigned, packets [next_packet, npackets) still to send
  kSent,      // every packet sent once, waiting for ACK / response
  kComplete,  // done; completion generated (if signaled) when it reaches the head
};

// Work a TM SRQ queues on the send queue of the QP a rendezvous request came
// through (tag_matching.md: "the ownership of the QP's Send Queue is passed to the
// TM-SRQ, which uses it to initiate rendezvous RDMA-Reads"): it completes on the
// TM SRQ's CQ, never on the QP's send CQ.
enum class TmSend : uint8_t {
  kNone,
  kRendezvousRead,  // RDMA READ of the sender's buffer into the tagged buffer
  kFin,             // SEND of the FIN that tells the sender its buffer is free
};

struct SendWqe {
  uint64_t wr_id = 0;  // kRendezvousRead: the tagged buffer's recv_wr_id
  ibv_wr_opcode opcode = IBV_WR_SEND;
  unsigned flags = 0;           // IBV_SEND_*
  uint32_t imm_data = 0;        // network byte order, as verbs hands it over
  uint32_t invalidate_rkey = 0;  // SEND_WITH_INV, LOCAL_INV
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  SgeList sgl;
  UdAddress ud;                    // UD only
  uint32_t xrc_srqn = 0;           // XRC send QP: the remote XRC SRQ (XRCETH)
  uint8_t* inline_data = nullptr;  // IBV_SEND_INLINE: copied here at post time
  uint32_t length = 0;             // total message bytes
  MwBind bind;                     // IBV_WR_BIND_MW
  TmSend tm = TmSend::kNone;

  // Requester state (IBA 9.7.4).
  SendState state = SendState::kQueued;
  uint32_t first_psn = 0;
  uint32_t npackets = 0;     // PSNs this message occupies (READ: one per response)
  uint32_t next_packet = 0;  // next packet index to (re)send
  uint32_t read_packets_received = 0;  // READ responses placed, in order
  uint32_t read_chunk_begin = 0;  // READ: first packet the request now answered asks for
  uint32_t read_range_begin = 0;  // READ: where the first request for this range began
  uint32_t read_requested = 0;  // READ: responses asked for so far (end of the last request)
  bool on_host = false;  // executed on a same-host peer's memory (rc/host_execution.cc)
  ibv_wc_status status = IBV_WC_SUCCESS;

  bool is_read() const { return opcode == IBV_WR_RDMA_READ; }
  bool is_atomic() const {
    return opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  }
  bool needs_response() const { return is_read() || is_atomic(); }
  // Executed by the send queue itself, never on the wire (IBA 10.6.7.2, 10.8.2.?):
  // no PSN, complete once every WQE before it has.
  bool is_local() const { return opcode == IBV_WR_BIND_MW || opcode == IBV_WR_LOCAL_INV; }
  uint32_t last_psn() const;
};

struct RecvWqe {
  uint64_t wr_id = 0;
  SgeList sgl;
  uint64_t length = 0;  // capacity of the scatter list (SGE lengths may sum past 2^32)
  ibv_wc_status status = IBV_WC_SUCCESS;  // set when a message fails while using it
};

// A posted receive WR as a receive queue or an SRQ keeps it (ibv_post_recv(3),
// ibv_post_srq_recv(3)): its SGEs copied into `sges`, the queue slot's arena.
void copy_recv_wr(const ibv_recv_wr& wr, RecvWqe& wqe, Sge* sges);

}  // namespace softrdma::engine
