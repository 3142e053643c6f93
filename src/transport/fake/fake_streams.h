// In-memory byte streams for unit tests (DESIGN.md §8), beside the fake datagram
// network (fake_network.h): the StreamTransport of stream.h without TCP, so that
// the iWARP family's faults can be scripted byte by byte.
//
// Several FakeStreams attach to one FakeStreamNetwork, each with its own GID. A
// link joins two ends; what one end writes is readable at the other at once, in
// order, up to a window of unread bytes (TCP's flow control: a writer that meets
// it is told kWritable once the reader made room). Nothing happens by itself:
// no threads and no wall-clock time; the engine's timers run on the test's
// ManualClock and the streams do what the test scripted, when bytes cross the
// offsets it named:
//
//   const auto link = streams.join(*a.streams, *b.streams);  // two descriptors
//   streams.end_at(link.id, kFirst, 100, End::kReset);        // a's 100th byte, then RST
//   streams.hold(link.id, kSecond);    // b's bytes wait ...
//   streams.release(link.id, kSecond); // ... until now
//   streams.drop(link.id);             // both ends reset at once
//
// Not thread-safe, as TcpStreams is not: the engines' owner (the test) uses it.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "transport/stream.h"

namespace softrdma::transport::fake {

class FakeStreams;

// How a scripted cut ends a link (end_at): kClose as a FIN (the reader gets the
// bytes before the offset, then the end of the stream; the writer's bytes beyond
// it are taken and lost), kReset as an RST (the reader gets those bytes, then
// ECONNRESET; the writer's write stops at the offset and it meets ECONNRESET).
enum class End : uint8_t { kClose, kReset };

// The two ends of a link: kFirst is join()'s first transport's.
enum Side : uint8_t { kFirst = 0, kSecond = 1 };

class FakeStreamNetwork {
 public:
  static constexpr uint64_t kNoOffset = std::numeric_limits<uint64_t>::max();

  // `window`: the most bytes one direction holds written and not yet read.
  explicit FakeStreamNetwork(size_t window = 1 << 20) : window_(window) {}
  ~FakeStreamNetwork();  // transports must be gone first (asserted)
  FakeStreamNetwork(const FakeStreamNetwork&) = delete;
  FakeStreamNetwork& operator=(const FakeStreamNetwork&) = delete;

  // A transport with the address `gid` (one per GID).
  std::unique_ptr<FakeStreams> attach(const Gid& gid);

  // A link made outside the transports (a connection manager's, after its MPA
  // exchange): one descriptor for each transport's adopt(). The descriptors are
  // no open file's (above any descriptor limit), so closing one is harmless.
  struct Joined {
    size_t id;
    std::array<int, 2> fds;
  };
  Joined join(FakeStreams& first, FakeStreams& second);

  // Scripts on the bytes `from` writes on link `id`:
  // Nothing more of them is readable (those readable already stay) until release.
  void hold(size_t id, Side from);
  void release(size_t id, Side from);
  // The link ends once `offset` of them were written: what lies beyond never arrives.
  void end_at(size_t id, Side from, uint64_t offset, End how);
  // The link is reset now, both ways; bytes not yet read are lost (an RST).
  void drop(size_t id);

  // Bytes `from` has written on link `id` (those beyond a cut included), and
  // those its peer has read.
  uint64_t written(size_t id, Side from) const;
  uint64_t read(size_t id, Side from) const;

 private:
  friend class FakeStreams;
  // The bytes one end writes and the other reads.
  struct Flow {
    std::deque<uint8_t> bytes;  // written and not read (nor lost to a closed reader)
    uint64_t written = 0, read = 0;
    uint64_t hold_at = kNoOffset;  // readable only below this offset
    uint64_t cut_at = kNoOffset;   // nothing at or beyond this offset is readable
    End cut = End::kClose;
    bool fin = false;              // the writer closed: the end after `bytes`
    uint64_t readable() const;     // bytes a read may take now
    bool at_end() const;           // a read meets the end (a FIN, or a cut)
    bool reset() const;            // that end is a reset cut's
  };
  struct Link {
    std::array<Gid, 2> gids{};
    std::array<FakeStreams*, 2> ends{};  // the transports, once adopted; null once closed
    std::array<StreamId, 2> ids{};
    std::array<bool, 2> closed{};
    std::array<Flow, 2> flows;   // flows[s]: what side s writes
    std::array<int, 2> error{};  // the errno each end meets (a reset)
  };
  Link& link(size_t id) { return *links_.at(id); }
  const Link& link(size_t id) const { return *links_.at(id); }
  void notify(Link& l);
  void detach(const Gid& gid);

  size_t window_;
  std::map<Gid, FakeStreams*> endpoints_;
  std::vector<std::unique_ptr<Link>> links_;
  // Descriptors join() handed out, not yet adopted: the link and the side.
  std::map<int, std::pair<size_t, Side>> unadopted_;
  int next_fd_ = 1 << 30;
};

class FakeStreams final : public StreamTransport {
 public:
  ~FakeStreams() override;
  FakeStreams(const FakeStreams&) = delete;
  FakeStreams& operator=(const FakeStreams&) = delete;

  int listen(uint16_t port) override;
  void stop_listening(uint16_t port) override;
  StreamId connect(const Gid& dst, uint16_t port, int& err) override;
  size_t poll(std::span<StreamEvent> events) override;
  ssize_t read(StreamId stream, std::span<uint8_t> into) override;
  ssize_t write(StreamId stream, std::span<const iovec> parts) override;
  StreamId adopt(int fd, int& err) override;
  void want_writable(StreamId stream, bool want) override;
  bool waiting_for_room() const override;
  void close(StreamId stream, CloseMode mode) override;
  bool peer_of(StreamId stream, Gid& address, uint16_t& port) const override;

  Gid local_gid() const override { return gid_; }
  // An eventfd, readable while poll() may have something to report.
  int rx_fd() const override { return event_fd_; }
  std::string describe() const override;

 private:
  friend class FakeStreamNetwork;
  FakeStreams(FakeStreamNetwork& network, const Gid& gid);
  struct Endpoint {
    size_t link;
    Side side;
    bool want_writable = false;
    bool closed_reported = false;
  };
  StreamId add(size_t link, Side side);
  void signal();
  bool readable(const Endpoint& e) const;

  FakeStreamNetwork& network_;
  const Gid gid_;
  const int event_fd_;
  std::map<StreamId, Endpoint> streams_;
  std::map<uint16_t, bool> listening_;
  std::deque<StreamEvent> news_;  // kAccepted / kConnected / kClosed not yet polled
  StreamId next_id_ = 1;
};

}  // namespace softrdma::transport::fake
