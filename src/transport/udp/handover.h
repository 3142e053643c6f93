// The hand-over channel of a host's shared UDP 4791 (docs/decisions/host-rnic.md,
// point 4): a packet that the reuseport group delivered to one process but whose
// destination QPN (or CM Comm ID, ServiceID) belongs to another is passed to that
// process whole, with the addresses the UDP socket showed, over an abstract Unix
// datagram socket named from the group (the host registry's path) and the owner's
// slot. The owner reads it in its poller as if from UDP.
//
// Abstract Unix names are per network namespace, like the address; they have no
// file permissions, so the receiver checks each datagram's sender (SCM_CREDENTIALS)
// against its own effective uid: another user's process can neither inject packets
// nor, since the names carry nothing of the RNIC's memory, read any.
#pragma once

#include <unistd.h>

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "wire/ip_udp.h"

namespace softrdma::transport::udp {

using wire::Gid;

// What precedes each handed-over packet. Host byte order: both ends are one host.
// A datagram holds one or more records (header, packet, zeros to a multiple of 8
// bytes), all for its one receiver: a burst for one owner costs one datagram of its
// queue, which holds only about 11 (net.unix.max_dgram_qlen; host-rnic.md, "Depth").
struct HandoverHeader {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t source_port = 0;  // the UDP source port the packet came from
  uint16_t from_slot = 0;    // the sender's slot (for diagnosis only)
  uint16_t flags = 0;        // kHandoverCongestionExperienced
  uint32_t length = 0;       // bytes of the packet after this header
  Gid source{};              // the packet's IP source, as the UDP socket showed it
  Gid destination{};         // the local address it was sent to (IP_PKTINFO)
};
static_assert(sizeof(HandoverHeader) == 48);
inline constexpr uint32_t kHandoverMagic = 0x4f485253;  // "SRHO" read little-endian
// 2: several records a datagram; 3: flags (the ECN mark the packet arrived with).
inline constexpr uint16_t kHandoverVersion = 3;
inline constexpr uint16_t kHandoverCongestionExperienced = 1;  // RxPacket's CE

// The largest packet handed over: an MTU-4096 RoCEv2 packet with every header
// (BTH ... ICRC, IBA 9.2–9.9) and a CM MAD are far below it. UDP_GRO datagrams
// are taken apart before they are handed over, so no packet is larger.
inline constexpr size_t kHandoverMaxPacket = 8192;
// The largest datagram, a receive buffer's size: records of one burst.
inline constexpr size_t kHandoverDatagramBytes = 64 << 10;
inline constexpr size_t kHandoverRecordAlign = 8;
static_assert(sizeof(HandoverHeader) % kHandoverRecordAlign == 0);
static_assert(sizeof(HandoverHeader) + kHandoverMaxPacket <= kHandoverDatagramBytes);

// Relaxed atomics: statistics, not synchronisation.
struct HandoverCounters {
  std::atomic<uint64_t> sent{0};            // packets
  std::atomic<uint64_t> sent_datagrams{0};  // datagrams that carried them
  std::atomic<uint64_t> send_no_owner{0};   // no socket of that slot (ECONNREFUSED/ENOENT)
  std::atomic<uint64_t> send_full{0};       // the owner's queue or our send buffer is full
  std::atomic<uint64_t> send_too_large{0};  // longer than kHandoverMaxPacket
  std::atomic<uint64_t> send_error{0};      // any other errno (counted, never retried)
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> dropped_foreign_user{0};  // sender's uid is not our euid
  std::atomic<uint64_t> dropped_malformed{0};     // bad magic/version, length, truncated:
                                                  // the datagram's remaining records
};

class Handover {
 public:
  // One packet read: the addresses it had on UDP, and its bytes (BTH ... ICRC) in
  // a buffer of the Handover's, valid until the next receive().
  struct Received {
    Gid source{};
    uint16_t source_port = 0;
    Gid destination{};
    uint32_t from_slot = 0;
    bool congestion_experienced = false;
    std::span<uint8_t> packet;
  };

  // Binds the socket of `slot` in `group_name` (the host registry's path, which
  // names the network namespace and the address). Null and why when it cannot (the
  // name is taken: another process of this slot is alive; no sockets);
  // `bind_error`, when given, gets bind's errno (EADDRINUSE: the name is taken).
  static std::unique_ptr<Handover> open(const std::string& group_name, uint32_t slot,
                                        std::string& why, int* bind_error = nullptr);
  ~Handover();
  // In a child of fork(): closes the copy of the parent's socket, whose name a new
  // process taking the parent's slot must be able to bind once the parent is gone.
  void close_after_fork() {
    if (fd_ >= 0) ::close(fd_);
  }
  Handover(const Handover&) = delete;
  Handover& operator=(const Handover&) = delete;

  int fd() const { return fd_; }
  uint32_t slot() const { return slot_; }
  const HandoverCounters& counters() const { return counters_; }
  // The abstract name of `slot`'s socket in this group (leading NUL included).
  std::string name_of(uint32_t slot) const;

  // Hands `packet` to `to_slot`'s process. Never blocks: false (counted) when that
  // slot has no socket, its queue is full, or the packet is too large. Any thread.
  // `ce`: the packet arrived marked CE (RxPacket::congestion_experienced).
  bool send(uint32_t to_slot, const Gid& source, uint16_t source_port, const Gid& destination,
            std::span<const uint8_t> packet, bool ce = false);
  // A burst: queue() keeps each packet (its bytes must stay valid until flush());
  // flush() hands each slot its packets in as few datagrams as fit, in the order
  // queued. The receiving thread only, one at a time. queue() is false (counted)
  // for a packet too large; a full queue is flushed first.
  bool queue(uint32_t to_slot, const Gid& source, uint16_t source_port, const Gid& destination,
             std::span<const uint8_t> packet, bool ce = false);
  struct Flushed {
    size_t sent = 0;    // packets handed over
    size_t failed = 0;  // packets dropped (counted by why: no owner, full, error)
  };
  // What became of the packets queued since the last flush().
  Flushed flush();
  // Doorbells, one per slot, in memory every member maps (the host registry's):
  // a send rings the receiver's after the datagram is queued, and receive() reads
  // the socket only when its own rang (or a full batch may have left more), so an
  // empty poll costs a load, not a system call. Unset: receive() always reads.
  using DoorbellOf = std::function<std::atomic<uint32_t>*(uint32_t slot)>;
  void set_doorbells(DoorbellOf doorbell_of);
  // Reads what is waiting, at most out.size() packets; datagrams of another user or
  // malformed ones are dropped and counted, never returned. One thread (the poller).
  size_t receive(std::span<Received> out);
  // Records of datagrams already read wait for receive(): the socket may not be
  // readable, yet receive() returns more.
  bool pending() const;

  static constexpr size_t kRing = 32;  // datagrams one receive() may read
  static constexpr size_t kMaxQueued = 64;  // packets queue() holds before it flushes

 private:
  struct Queued {
    uint32_t to_slot;
    uint32_t order;  // keeps a slot's packets in arrival order through the sort
    HandoverHeader header;
    std::span<const uint8_t> packet;
  };
  explicit Handover(int fd, uint32_t slot, std::string prefix);
  // The address of `slot`'s socket; its length.
  socklen_t address_of(uint32_t slot, sockaddr_un& address) const;
  HandoverHeader header_for(const Gid& source, uint16_t source_port, const Gid& destination,
                            size_t length, bool ce) const;
  // One datagram of `count` iovecs to `slot`'s socket, with our credentials: 0 or errno.
  int send_datagram(uint32_t to_slot, iovec* iov, size_t count);
  // Sends what is queued, each slot's together, into flushed_.
  void send_queued();
  // Sends queued_[first, last), all for one slot, in datagrams of at most
  // kHandoverDatagramBytes; adds to `flushed`.
  void flush_slot(size_t first, size_t last, Flushed& flushed);
  bool from_this_user(size_t i);
  bool next_record(Received& out);
  [[gnu::cold]] bool send_failed(int error, uint64_t packets = 1);
  void ring(uint32_t to_slot);
  // Whether receive() need read the socket: the doorbell rang (cleared here).
  bool doorbell_rang();

  int fd_ = -1;
  uint32_t slot_ = 0;
  // What SCM_CREDENTIALS says; the kernel checks it is ours. Atomic: senders of
  // several threads may each learn it after a fork.
  std::atomic<pid_t> pid_{0};
  uid_t euid_ = 0;
  gid_t egid_ = 0;
  std::string prefix_;  // "softrdma-handover/<group or its hash>/" without the NUL
  HandoverCounters counters_;
  struct Ring;
  std::unique_ptr<Ring> ring_;
  std::vector<Queued> queued_;  // capacity kMaxQueued, reserved at open
  Flushed flushed_;             // since the last flush()
  DoorbellOf doorbell_of_;
  std::atomic<uint32_t>* own_doorbell_ = nullptr;
  bool batch_was_full_ = false;  // the last read filled the ring: more may wait
};

}  // namespace softrdma::transport::udp
