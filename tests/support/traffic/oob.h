// The out-of-band channel between the two processes of a run, as ibv_rc_pingpong
// has over TCP: the QP numbers, PSNs, GIDs and memory keys to connect, then the
// checksums of one-sided transfers and the end of each phase. The same framing
// carries each node's results to the launcher (report.h) on a socketpair of its
// own, so the launcher reads structs, not text. Framed messages over
// a stream socket: a socketpair when one parent starts both processes, or TCP on
// 127.0.0.1 when they are started by hand. Non-blocking both ways, so two processes
// that both have much to say never wait on each other.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace softrdma::traffic {

enum class MsgType : uint8_t {
  kHello = 1,  // addresses and keys (node.h)
  kReady = 2,  // QPs are in RTS
  kCheck = 3,  // "hash these ranges of your memory" (checks.h)
  kCheckReply = 4,
  kPhaseDone = 5,   // my requests of this phase are all complete and verified
  kFail = 6,        // I stop: a fatal error (text)
  kPhaseStart = 7,  // my receive WQEs of this phase are posted: send
  kRoundDone = 8,   // UC, UD: your marker of this round arrived (lane.h)
  // Side -> launcher (report.h), never between the nodes.
  kProgress = 9,      // messages completed so far in the current phase
  kPhaseResult = 10,  // one phase's record
  kFinalResult = 11,  // errors, what was verified, engine counters
};

// Little-endian encoder / decoder of message payloads.
class Encoder {
 public:
  Encoder& u8(uint8_t v) { return raw(&v, 1); }
  Encoder& u32(uint32_t v) { return raw(&v, 4); }
  Encoder& u64(uint64_t v) { return raw(&v, 8); }
  Encoder& bytes(std::span<const uint8_t> b) { return raw(b.data(), b.size()); }
  Encoder& str(const std::string& s);
  const std::vector<uint8_t>& data() const { return buf_; }

 private:
  Encoder& raw(const void* p, size_t n);
  std::vector<uint8_t> buf_;
};

class Decoder {
 public:
  explicit Decoder(std::span<const uint8_t> b) : buf_(b) {}
  uint8_t u8() {
    uint8_t v = 0;
    raw(&v, 1);
    return v;
  }
  uint32_t u32() {
    uint32_t v = 0;
    raw(&v, 4);
    return v;
  }
  uint64_t u64() {
    uint64_t v = 0;
    raw(&v, 8);
    return v;
  }
  void bytes(std::span<uint8_t> out) { raw(out.data(), out.size()); }
  std::string str();
  // False once a read ran past the end (every later read gives zeros).
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == buf_.size(); }

 private:
  void raw(void* p, size_t n);
  std::span<const uint8_t> buf_;
  size_t pos_ = 0;
  bool ok_ = true;
};

struct Frame {
  MsgType type{};
  std::vector<uint8_t> payload;
};

class OobChannel {
 public:
  explicit OobChannel(int fd);  // takes ownership; made non-blocking
  ~OobChannel();
  OobChannel(const OobChannel&) = delete;
  OobChannel& operator=(const OobChannel&) = delete;

  // TCP on 127.0.0.1 (or a given host) for processes started by hand. -1 and a
  // message on failure. listen waits for one peer; connect retries for a while.
  static int listen_and_accept(uint16_t port, int timeout_ms, std::string& error);
  static int connect_to(const std::string& host, uint16_t port, int timeout_ms, std::string& error);

  int fd() const { return fd_; }
  void send(MsgType type, const Encoder& payload);
  // Writes what the socket takes / reads what it has. False when the socket failed
  // (`error()` says why). The peer closing is not a failure here: frames it sent
  // before are still delivered by next(); closed() says it is gone.
  bool flush();
  bool receive();
  bool closed() const { return closed_; }
  std::optional<Frame> next();
  bool wants_write() const { return !out_.empty(); }
  const std::string& error() const { return error_; }

  // Setup: blocks (flushing) until a frame arrives, or the timeout / an error.
  std::optional<Frame> wait_frame(int timeout_ms);
  // The end of a process: blocks until everything sent is written. False on an
  // error or the timeout.
  bool drain(int timeout_ms);

 private:
  int fd_;
  std::vector<uint8_t> out_;  // bytes not yet written, from out_pos_
  size_t out_pos_ = 0;
  std::vector<uint8_t> in_;
  std::string error_;
  bool closed_ = false;
};

}  // namespace softrdma::traffic
