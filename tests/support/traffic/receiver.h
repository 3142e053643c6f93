// The responder side of one QP in a traffic node: posts receive WQEs for exactly
// the messages the peer's plan will send that consume one (SEND, SEND with
// immediate, RDMA WRITE with immediate), in plan order, and checks each receive
// completion: status, opcode, byte_len, immediate data, wr_id order, and every byte
// of the received message against contents regenerated from the plan, including
// that the buffer's slack past the message was left alone.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "traffic/buffers.h"
#include "traffic/plan.h"
#include "traffic/stats.h"

namespace softrdma::traffic {

struct ReceiverSetup {
  ibv_qp* qp = nullptr;
  uint32_t qp_index = 0;
  uint32_t peer_qpn = 0;      // what wc.src_qp must say
  Region* buffers = nullptr;  // receive buffers (a FIFO arena over it)
  uint32_t window = 16;       // receive WQEs posted ahead
  ErrorLog* errors = nullptr;
  Verified* verified = nullptr;
  bool spoil_first_send = false;  // tests of the checks: flip a byte of the first SEND
};

class Receiver {
 public:
  explicit Receiver(const ReceiverSetup& setup);

  // `peer_plan`: the peer's whole plan for this QP and phase.
  void start_phase(uint32_t phase, const std::vector<Message>& peer_plan);
  bool pump();
  void on_completion(const ibv_wc& wc);
  bool done() const { return completed_ == expected_.size(); }
  OpStats received() const { return received_; }
  std::string describe() const;

 private:
  struct Posted {
    const Message* msg = nullptr;
    uint64_t offset = 0;  // in the buffers region
    uint32_t capacity = 0;
    Sgl sgl;
  };

  bool post(const Message& m);
  void check_wc(const ibv_wc& wc, const Message& m);
  void check_bytes(const Posted& p);
  std::string where(const Message& m) const;

  const ReceiverSetup setup_;
  FifoArena arena_;
  uint32_t phase_ = 0;
  std::vector<Message> expected_;  // the peer's messages that consume a receive WQE
  size_t next_post_ = 0;
  size_t completed_ = 0;
  std::deque<Posted> posted_;
  OpStats received_;
  bool send_spoiled_ = false;
};

}  // namespace softrdma::traffic
