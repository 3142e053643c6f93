// StreamTransport over the kernel's TCP (stream.h): non-blocking sockets under one
// epoll descriptor, TCP_NODELAY on every connection (an RDMA message is written
// whole and waits for nothing; RFC 5044 §8 leaves Nagle to the implementation,
// and siw turns it off too). Not thread-safe: the engine's owner uses it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "transport/stream.h"

namespace softrdma::transport::tcp {

class TcpStreams final : public StreamTransport {
 public:
  // Serves `address` (an IPv4-mapped or IPv6 GID); null and why when epoll fails.
  static std::unique_ptr<TcpStreams> open(const Gid& address, std::string& why);
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
  void close(StreamId stream) override;
  bool peer_of(StreamId stream, Gid& address, uint16_t& port) const override;

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
  TcpStreams(const Gid& address, int epoll_fd) : address_(address), epoll_fd_(epoll_fd) {}
  StreamId add(int fd, bool connecting, const Gid& peer, uint16_t peer_port);
  // Epoll data: a listener's port | kListenerTag, or a stream id.
  static constexpr uint64_t kListenerTag = uint64_t(1) << 32;
  // Epoll data of a stream being closed: its fd | kClosingTag (close()).
  static constexpr uint64_t kClosingTag = uint64_t(1) << 33;
  static constexpr int64_t kLingerNs = 2'000'000'000;
  void drain_closing(int fd);
  void expire_closing();
  size_t accept_all(uint16_t port, int fd, std::span<StreamEvent> events);
  StreamEvent settle_connect(StreamId id, Connection& c);

  Gid address_;
  int epoll_fd_;
  std::map<uint16_t, int> listeners_;         // port -> fd
  std::map<StreamId, Connection> connections_;
  std::map<int, int64_t> closing_;  // fd -> when it is closed at the latest
  StreamId next_id_ = 1;
};

}  // namespace softrdma::transport::tcp
