// The responder's queue of READ responses and ATOMIC acknowledgements waiting to
// be produced (IBA 9.7.5.1.2, 9.7.5.1.7), and the bounds on what it takes.
//
// Two kinds of entry, bounded apart: answers to new requests, which the requester
// may have outstanding up to an agreed limit, and answers to requests repeated
// (duplicates: a retry, or selective repeat asking for a READ's missing parts
// alone). A network's copies of repeated requests must never take the room the
// new ones are owed (a new one refused is an Invalid Request NAK that ends the
// QP), and the duplicates get a bounded room of their own (one refused is asked
// for again).
//
// How many new ones: IBA 9.5 (max_dest_rd_atomic) counts requests. A go-back-N
// requester asks for a READ in one request at a time, so that is the bound. A
// selective repeat requester asks for a long READ's next chunk while the last is
// being repaired (docs/decisions/selective-repeat.md), so one WQE may stand for
// several requests; every one lies within the span from its una, and each takes
// at least one PSN, so the span bounds what it has unanswered. Not exactly what
// is queued here: a part asked for again goes ahead of the queue, so the
// requester may have it, and move its una on, while the new request that
// stood for it still waits to be produced (and is sent again). Such entries
// are few beside the span (at most max_rd_atomic WQEs, chunks of half a window
// or more). The storage grows to what the peer uses, up to the bounds, rather
// than holding the span's worth for every QP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace softrdma::engine::rc {

// A response waiting to be produced: the READ's range, or the ATOMIC's result.
struct QueuedResponse {
  bool is_read = true;
  bool duplicate = false;  // answers a repeated request (takes the duplicates' room)
  uint32_t psn = 0;        // the request's (first response's) PSN
  uint32_t msn = 0;        // carried in the AETH: the MSN once the request executed
  uint64_t va = 0;         // READ
  uint32_t rkey = 0;       // READ
  uint32_t len = 0;        // READ
  uint32_t sent = 0;       // READ: packets produced so far
  uint64_t original = 0;   // ATOMIC
  const uint8_t* host = nullptr;  // READ: the range, resolved when it executed
  uint64_t generation = 0;        // the MR table's generation then
  bool repeat_first = false;      // READ asked again: its first response goes twice
};

class ResponseQueue {
 public:
  struct Limits {
    size_t new_requests = 1;  // answers to new requests queued at once
    size_t duplicates = 1;    // answers to repeated requests queued at once
  };
  // The limits for a connection: go-back-N, or selective repeat with `span`.
  static Limits limits_for(uint32_t max_dest_rd_atomic, bool selective, uint32_t span);

  // Empties the queue and sets its limits.
  void reset(Limits limits);
  // New limits, what is queued kept (max_dest_rd_atomic changed in SQD): an
  // entry already past a lowered limit stays; the next of its kind waits.
  void set_limits(Limits limits) { limits_ = limits; }
  // Whether an entry of this kind fits within its limit now.
  bool admits(bool duplicate) const;
  // At the back (PSN order), or at the front (a part asked again goes first).
  // The caller checked admits().
  void push_back(const QueuedResponse& r);
  void push_front(const QueuedResponse& r);
  QueuedResponse& front() { return slots_[head_]; }
  const QueuedResponse& back() const { return slots_[index(count_ - 1)]; }
  void pop_front();
  void pop_back();
  void clear();
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  size_t duplicates() const { return duplicates_; }
  // Storage held now (grows to what the peer uses, at most the limits' sum).
  size_t capacity() const { return slots_.size(); }

 private:
  size_t index(size_t i) const { return (head_ + i) % slots_.size(); }
  void make_room();

  std::vector<QueuedResponse> slots_ = std::vector<QueuedResponse>(1);
  size_t head_ = 0;
  size_t count_ = 0;
  size_t duplicates_ = 0;
  Limits limits_;
};

}  // namespace softrdma::engine::rc
