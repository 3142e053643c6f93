// RoCEv2 connected services behind one QP: Reliable Connected (IBA 9.7) and
// Unreliable Connected (IBA 9.8, the same packets without acknowledgements,
// retries, READ or ATOMIC). The requester turns send WQEs into request packets,
// the completer consumes ACKs and responses and completes WQEs, the responder
// executes incoming requests. One file per role; UC's differences are where the
// roles ask acknowledged().
#pragma once

#include <optional>
#include <vector>

#include "engine/host/executor.h"
#include "engine/roce/protocol.h"
#include "engine/roce/tx_batch.h"
#include "engine/rc/completer.h"
#include "engine/rc/liveness.h"
#include "engine/rc/loss_recovery.h"
#include "engine/rc/path.h"
#include "engine/rc/rate_control.h"
#include "engine/rc/requester.h"
#include "engine/rc/responder.h"
#include "wire/sack.h"

namespace softrdma::engine {
class Qp;
}

namespace softrdma::engine::rc {

class RcConnection final : public roce::RoceProtocol {
 public:
  // `tx`: the family's batch its packets are built in; `via`: the transport they
  // leave by (the RoCE family's, roce/family.h).
  RcConnection(Qp& qp, roce::TxBatch& tx, transport::Transport& via);

  void on_packet(wire::PacketView packet, const transport::RxPacket& from,
                 Nanos now) override;
  void on_send_posted(Nanos now) override;
  void on_burst_end(Nanos now) override;
  bool on_tx_ready(Nanos now, uint32_t budget) override;
  Nanos deadline() const override;
  void on_timer(Nanos now) override;
  void on_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now) override;
  bool on_same_host() const override { return path_.peer != nullptr; }

  Qp& qp() { return qp_; }
  // The batch this connection's packets are built in (its family's).
  roce::TxBatch& tx() { return tx_; }
  const Path& path() const { return path_; }
  Requester& requester() { return requester_; }
  Completer& completer() { return completer_; }
  Responder& responder() { return responder_; }
  // What is resent after a loss, and the window (loss_recovery.h).
  LossRecovery& recovery() { return *recovery_; }
  const Liveness& liveness() const { return liveness_; }
  // The rate this connection may send data at (rate_control.h; DCQCN).
  RateControl& rate() { return rate_; }
  const RateControl& rate() const { return rate_; }
  // After a sender stopped: when the pacer held it, its timer resumes it.
  void arm_pacer_timer();
  void publish_rate();
  // What the same-host executor counts for this connection (host/executor.h).
  host::HostRetries& host_retries() { return host_retries_; }

  // The opcode of `operation` (IBA 9.2.1: low 5 bits) on this QP's transport.
  uint8_t opcode(uint8_t operation) const { return uint8_t(opcode_base_ | operation); }
  // RC: requests are acknowledged (and retried); UC: never (IBA 9.8).
  bool acknowledged() const { return acknowledged_; }
  // Both ends run selective repeat (chosen at RTR; selective_repeat.h).
  bool selective() const { return selective_; }
  // PSNs one SACK describes (wire/sack.h): what the responder holds past a gap, and
  // how far past the oldest unacknowledged PSN the requester may send.
  uint32_t sack_span() const { return sack_span_; }
  // ACKs and SACKs carry the responder's hold (both ends agreed; wire/ack_hold.h).
  bool ack_hold() const { return ack_hold_; }
  // Builds a packet along this connection's path.
  wire::PacketView emit(uint8_t opcode, size_t payload_len, uint32_t psn);
  // Any role that hits a fatal error: QP to Error (IBA 11.6.2), async event.
  void fail(Nanos now, std::optional<ibv_event_type> event);

 private:
  void load_path();
  bool agreed_selective_repeat() const;
  bool agreed_wide_sack() const;
  bool agreed_ack_hold() const;
  // Congestion control (rate_control.h): a CNP from the peer, a CE-marked packet
  // from it.
  void on_cnp(Nanos now);
  void on_congestion_experienced(Nanos now);

  Qp& qp_;
  roce::TxBatch& tx_;
  transport::Transport& via_;
  const uint8_t opcode_base_;  // IBA 9.2.1: the transport bits of every opcode sent
  const bool acknowledged_;
  bool selective_ = false;
  uint32_t sack_span_ = wire::kSackSpan;
  bool ack_hold_ = false;
  Path path_;
  std::unique_ptr<LossRecovery> recovery_;
  Requester requester_;
  Completer completer_;
  Responder responder_;
  Liveness liveness_;
  RateControl rate_;
  host::HostRetries host_retries_;
};

}  // namespace softrdma::engine::rc
