// What a traffic node counts, and where it says what went wrong.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "traffic/plan.h"

namespace softrdma::traffic {

struct OpStats {
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t latency_ns = 0;  // sum over messages of post -> completion
  uint32_t max_length = 0;

  void add(uint32_t length, int64_t latency) {
    ++messages;
    bytes += length;
    latency_ns += uint64_t(latency > 0 ? latency : 0);
    if (length > max_length) max_length = length;
  }
  void merge(const OpStats& o) {
    messages += o.messages;
    bytes += o.bytes;
    latency_ns += o.latency_ns;
    if (o.max_length > max_length) max_length = o.max_length;
  }
};
using OpTable = std::array<OpStats, kOpCount>;

// What was verified (counted by the process that compared the bytes).
struct Verified {
  uint64_t completions = 0;     // work completions checked (both queues)
  uint64_t bytes_compared = 0;  // bytes compared with regenerated contents
  uint64_t crc_matches = 0;     // ranges whose CRCs the two processes agreed on
  uint64_t atomics = 0;         // atomic results and slot values matched with the model
  // Messages that deliver data (SEND, SEND with immediate, RDMA WRITE (with
  // immediate)): posted and completed by the requester, arrived intact at the
  // target, and (UC, UD only) resolved as never arrived. sent == received + lost.
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t lost = 0;
  uint64_t late = 0;        // UD: arrived after its round was closed (counted received)
  uint64_t duplicates = 0;  // UD: arrived a second time (checked, not counted received)
  void merge(const Verified& o) {
    completions += o.completions;
    bytes_compared += o.bytes_compared;
    crc_matches += o.crc_matches;
    atomics += o.atomics;
    sent += o.sent;
    received += o.received;
    lost += o.lost;
    late += o.late;
    duplicates += o.duplicates;
  }
};

// Errors go to stderr as they happen (the first kPrintLimit of them) and are counted.
// A fatal one (a failed completion, a broken order) stops the node: the QP is in
// error and nothing after it can be trusted.
class ErrorLog {
 public:
  static constexpr uint64_t kPrintLimit = 40;
  explicit ErrorLog(std::string prefix) : prefix_(std::move(prefix)) {}
  void add(const std::string& message);
  void fatal(const std::string& message);
  uint64_t count() const { return count_; }
  bool is_fatal() const { return fatal_; }

 private:
  std::string prefix_;
  uint64_t count_ = 0;
  bool fatal_ = false;
};

}  // namespace softrdma::traffic
