/* bench/verb_ops: the instructions one verb call runs (issue 26, issue 29), counted
 * by callgrind in the measuring process while a peer process of its own serves the
 * other end (bench/verb_instructions.sh). What both processes share: one end of an
 * RC connection, its set-up, and the messages they exchange over a socket. Plain C
 * against <infiniband/verbs.h>, as applications use verbs. */
#pragma once

#include <infiniband/verbs.h>
#include <stdint.h>

enum {
  kBufferBytes = 1 << 16,  /* page-aligned, as perftest's: same-host peers store into it */
  kMessageBytes = 8,       /* the payload of every WRITE and SEND */
  kSendDepth = 64,
  kRecvDepth = 512,        /* at most 1024: a larger RQ takes no same-host SENDs */
  kChunk = 256,            /* SENDs between two synchronisations: never an RNR */
  kCqDepth = kSendDepth + kRecvDepth,
};

/* What one end tells the other to connect and to WRITE into its buffer. */
struct Endpoint {
  uint32_t qpn;
  uint32_t rkey;
  uint64_t addr;
  union ibv_gid gid;
};

/* One end: a context, PD, CQ (with a completion channel), RC QP and buffer. */
struct End {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_comp_channel* channel;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t* buf;
};

/* The peer's commands (one struct each way over the socket). */
enum Command {
  kCmdReceived = 'R',  /* answer once `count` SENDs have arrived in all */
  kCmdSend = 'T',      /* send `count` 8 B SENDs, answer when they completed */
  kCmdQuit = 'Q',      /* tear down and exit */
};
struct Message {
  uint32_t command;
  uint32_t count;
};

/* Prints what failed and exits: a benchmark whose set-up failed has no figure. */
_Noreturn void die(const char* what);

void end_open(struct End* end);
void end_close(struct End* end);
/* Exchanges endpoints over `fd` and moves the QP to RTS towards the other's. */
struct Endpoint end_connect(struct End* end, int fd);
int post_one(struct ibv_qp* qp, enum ibv_wr_opcode opcode, struct ibv_sge* sge,
             const struct Endpoint* remote);
int post_recv_one(struct End* end);
/* Polls (busy) until one completion arrived; dies on an error status. */
struct ibv_wc wait_one(struct ibv_cq* cq);
void send_message(int fd, uint32_t command, uint32_t count);
struct Message receive_message(int fd);

/* The peer's main loop (verb_ops_peer.c): serves commands on `fd` until kCmdQuit. */
int peer_main(int fd);
