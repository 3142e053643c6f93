// The requester side of one QP in a traffic node: posts its plan's messages with up
// to `depth` outstanding, checks every send completion (status, opcode, byte_len,
// wr_id order, the bytes READ brought back, the value an atomic returned against a
// model of the remote slot) and gathers, per epoch, the one-sided ranges the target
// must confirm (checks.h).
//
// Epochs: RDMA WRITEs go to consecutive ranges of the target's landing region, so
// nothing is overwritten before it is checked. When the next WRITE does not fit, the
// lane stops posting, waits for its outstanding work, has the target check the
// epoch, and starts again at offset 0 (UC: of the other half, Lane::epoch_landing_base).
//
// Rounds (UC, UD: nothing acknowledges, a send completion says only that the
// message left): the lane posts at most `round_budget` messages that consume a
// receive WQE, drains its send queue, then posts a marker (a 0-byte SEND with
// immediate naming how many such messages it posted) and repeats it, backing
// off, until the peer says over the out-of-band channel that the marker arrived.
// Messages are delivered in order on a UC QP, so by then each earlier message
// either arrived or never will; the peer's receive WQEs are reposted before it
// answers, so the next round cannot find none. An epoch ends with a round
// (docs/decisions/traffic-tool.md).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "traffic/buffers.h"
#include "traffic/checks.h"
#include "traffic/marker.h"
#include "traffic/plan.h"
#include "traffic/stats.h"

namespace softrdma::traffic {

struct RemoteMemory {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;
};

struct LaneSetup {
  ibv_qp* qp = nullptr;
  Transport transport = Transport::kRc;
  ibv_ah* ah = nullptr;         // UD: the peer's address
  uint32_t remote_qpn = 0;      // UD: the peer's QP
  uint32_t remote_qkey = 0;     // UD
  uint32_t round_budget = 0;    // UC, UD: WQE-consuming messages per round (peer's window)
  uint32_t qp_index = 0;
  Region* local = nullptr;    // source / destination buffers (a FIFO arena over it)
  RemoteMemory landing;       // the peer's landing region for this QP
  RemoteMemory exposed;       // the peer's exposed region (READ)
  RemoteMemory slot;          // the peer's 8-byte atomic slot for this QP
  uint64_t exposed_key = 0;   // contents of the peer's exposed region
  uint64_t slot_initial = 0;  // the slot's value before any atomic
  ErrorLog* errors = nullptr;
  Verified* verified = nullptr;
  bool spoil_first_read = false;  // tests of the checks: flip a byte of the first READ
};

class Lane {
 public:
  static constexpr size_t kMaxCheckItems = 512;

  explicit Lane(const LaneSetup& setup);

  void start_phase(uint32_t phase, std::vector<Message> plan, uint32_t depth);
  // Posts what the window, the local buffers and the epoch allow. True if it posted.
  bool pump(int64_t now);
  void on_completion(const ibv_wc& wc, int64_t now);
  // A check request, once an epoch is complete; the lane waits for its reply.
  std::optional<CheckRequest> take_check();
  void on_check_reply(const CheckReply& reply);
  // UC, UD: the peer saw the marker of `round` (the low bits, MarkerTag). The
  // phase's time runs to here: only now is the round's delivery known.
  void on_round_done(uint32_t round, int64_t now);

  bool done() const { return state_ == State::kDone; }
  const OpTable& stats() const { return stats_; }
  // Messages of this phase's plan completed, and planned (progress, report.h).
  uint64_t completed() const;
  uint64_t planned() const { return plan_.size(); }
  int64_t first_post_ns() const { return first_post_ns_; }  // 0: none this phase
  int64_t last_completion_ns() const { return last_completion_ns_; }
  std::string describe(int64_t now) const;

 private:
  enum class State : uint8_t {
    kIssuing,
    kDraining,
    kMarking,  // UC, UD: the round's marker is out, repeated until the peer saw it
    kCheckReady,
    kAwaitingReply,
    kDone
  };
  static const char* to_string(State s);

  struct Outstanding {
    const Message* msg = nullptr;
    uint64_t local_offset = 0;   // in the local region
    uint64_t remote_offset = 0;  // WRITE: in the landing region
    int64_t posted_ns = 0;
    bool signaled = true;
    uint64_t expected_original = 0;  // atomics: what the slot held before
    Sgl sgl;
  };

  bool epoch_full_for(const Message& m, uint64_t landing_used, size_t items) const;
  uint64_t epoch_landing_length() const;
  uint64_t epoch_landing_base() const;
  bool must_signal(const Message& m, uint64_t landing_after, size_t items_after) const;
  bool post(const Message& m, int64_t now);
  bool post_marker(int64_t now);
  bool ends_round(const Message& m, uint32_t round_consumed) const;
  void on_marker_completion(const ibv_wc& wc);
  void after_drain();
  void prepare_local(const Message& m, Outstanding& o, uint8_t* buf);
  void set_remote(const Message& m, Outstanding& o, ibv_send_wr& wr);
  void check_wc(const ibv_wc& wc, const Outstanding& o);
  void finish(const Outstanding& o, int64_t now);
  void finish_read(const Outstanding& o, uint8_t* buf);
  void advance();
  std::string where(const Message& m) const;

  const LaneSetup setup_;
  FifoArena arena_;
  uint64_t slot_model_;  // what the peer's slot holds once all posted atomics ran
  bool atomics_unchecked_ = false;

  uint32_t phase_ = 0;
  std::vector<Message> plan_;
  size_t next_ = 0;
  uint32_t depth_ = 1;
  State state_ = State::kDone;
  std::deque<Outstanding> outstanding_;
  uint32_t unsignaled_run_ = 0;

  uint32_t epoch_ = 0;
  uint64_t landing_used_ = 0;
  std::vector<CheckItem> items_;
  std::vector<uint32_t> crcs_;  // the requester's CRC of each item

  // Rounds (UC, UD).
  uint32_t consumed_posted_ = 0;  // WQE-consuming messages posted this phase
  uint32_t round_consumed_ = 0;   // of which in this round
  uint32_t round_ = 0;            // rounds of this phase so far
  uint32_t round_budget_ = 0;     // this round's allowance
  uint32_t markers_this_round_ = 0;
  uint32_t markers_outstanding_ = 0;
  int64_t next_marker_ns_ = 0;

  OpTable stats_{};
  bool read_spoiled_ = false;
  int64_t first_post_ns_ = 0;
  int64_t last_completion_ns_ = 0;
};

}  // namespace softrdma::traffic
