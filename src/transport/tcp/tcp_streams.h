// StreamTransport over the kernel's TCP (stream.h): non-blocking sockets under one
// epoll descriptor, TCP_NODELAY on every connection (an RDMA message is written
// whole and waits for nothing; RFC 5044 §8 leaves Nagle to the implementation,
// and siw turns it off too). Not thread-safe: the engine's owner uses it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "transport/stream.h"

namespace softrdma::transport::tcp {

// How long a closing stream waits (tcp_streams_close.cc): with its FIN held, for
// the peer to be quiet (quiet_ns) or at most linger_ns; with its FIN sent, for the
// peer's FIN at most linger_ns. `exit_waits`: a thread drives these streams (the
// progress loop), and a process that exits waits for it to end the closing ones.
struct CloseTiming {
  int64_t quiet_ns = 100'000'000;
  int64_t linger_ns = 2'000'000'000;
  bool exit_waits = false;
};

// How a connection notices a peer that went away without a word: its host
// powered off or cut off, its FIN or RST lost on the way (tcp_streams.cc,
// watch_peer). After `idle_s` seconds of silence TCP keepalive probes the peer
// every `idle_s`; a peer silent for bound_ms() — probes unanswered, or bytes
// unacknowledged (TCP_USER_TIMEOUT) — ends the stream: kClosed, ETIMEDOUT.
// `idle_s` 0: the kernel's defaults (no keepalive; unacknowledged bytes are
// retransmitted for about 15 minutes, tcp_retries2), a dead idle peer never noticed.
struct PeerLiveness {
  int idle_s = 1;
  // As an RC QP's retry budget: retry_cnt 7 and the first try (IBA 9.7.6.1.3).
  int probes = 8;
  constexpr int bound_ms() const { return (1 + probes) * idle_s * 1000; }
};

class TcpStreams final : public StreamTransport {
 public:
  // Serves `address` (an IPv4-mapped or IPv6 GID); null and why when epoll fails.
  static std::unique_ptr<TcpStreams> open(const Gid& address, std::string& why,
                                          CloseTiming timing = {},
                                          PeerLiveness liveness = {});
  ~TcpStreams() override;
  TcpStreams(const TcpStreams&) = delete;
  TcpStreams& operator=(const TcpStreams&) = delete;

  int listen(uint16_t port) override;
  void stop_listening(uint16_t port) override;
  StreamId connect(const Gid& dst, uint16_t port, int& err) override;
  size_t poll(std::span<StreamEvent> events) override;
  ssize_t read(StreamId stream, std::span<uint8_t> into) override;
  ssize_t write(StreamId stream, std::span<const iovec> parts) override;
  StreamId adopt(int fd, int& err) override;
  void want_writable(StreamId stream, bool want) override;
  bool waiting_for_room() const override { return wanting_room_ > 0; }
  void close(StreamId stream, CloseMode mode) override;
  bool peer_of(StreamId stream, Gid& address, uint16_t& port) const override;

  // Streams close() ended whose sockets are still open (a FIN held or a linger).
  size_t closing_streams() const { return closing_.size(); }

  Gid local_gid() const override { return address_; }
  int rx_fd() const override { return epoll_fd_; }
  std::string describe() const override;

 private:
  struct Connection {
    int fd = -1;
    bool connecting = false;  // connect() not yet completed
    Gid peer{};
    uint16_t peer_port = 0;
    bool want_writable = false;
  };
  void watch(StreamId id, const Connection& c);
  StreamEvent writable(StreamId id, Connection& c);
  TcpStreams(const Gid& address, int epoll_fd, int timer_fd, CloseTiming timing,
             PeerLiveness liveness)
      : address_(address), epoll_fd_(epoll_fd), timer_fd_(timer_fd), timing_(timing),
        liveness_(liveness) {}
  StreamId add(int fd, bool connecting, const Gid& peer, uint16_t peer_port);
  // Keepalive and TCP_USER_TIMEOUT on a stream's socket, as liveness_ says.
  void watch_peer(int fd) const;
  // SO_LINGER 0 on a live stream's socket, so that it resets when the process
  // dies; off when the stream is closed (tcp_streams.cc).
  static void reset_if_abandoned(int fd, bool on);
  // Epoll data: a listener's port | kListenerTag, or a stream id.
  static constexpr uint64_t kListenerTag = uint64_t(1) << 32;
  // Epoll data of a stream being closed: its fd | kClosingTag (close()); of the
  // timer that ends the closing streams' waits: kTimerTag.
  static constexpr uint64_t kClosingTag = uint64_t(1) << 33;
  static constexpr uint64_t kTimerTag = uint64_t(1) << 34;
  // A stream being closed: its FIN not yet sent (kAfterPeer: until the peer's FIN,
  // or quiet_until, or fin_by, whichever comes first), or sent and the socket
  // drained until the peer's FIN or close_by.
  struct Closing {
    bool fin_sent = false;
    bool counted = false;  // among the closings an exiting process waits for
    int64_t quiet_until = 0, fin_by = 0, close_by = 0;
    int64_t due() const { return fin_sent ? close_by : std::min(quiet_until, fin_by); }
  };
  void send_fin(int fd, Closing& c, int64_t now);
  void count_closing(Closing& c, int64_t now);
  void close_now(std::map<int, Closing>::iterator it);
  void drain_closing(int fd);
  void expire_closing();
  void arm_closing_timer();
  void finish_closing();
  size_t accept_all(uint16_t port, int fd, std::span<StreamEvent> events);
  StreamEvent settle_connect(StreamId id, Connection& c);

  Gid address_;
  int epoll_fd_;
  int timer_fd_;  // timerfd, in epoll_fd_: the earliest Closing::due()
  CloseTiming timing_;
  PeerLiveness liveness_;
  std::map<uint16_t, int> listeners_;         // port -> fd
  std::map<StreamId, Connection> connections_;
  std::map<int, Closing> closing_;  // by fd
  StreamId next_id_ = 1;
  size_t wanting_room_ = 0;  // connections with want_writable set
};

}  // namespace softrdma::transport::tcp
