#include "transport/fake/fake_streams.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>

namespace softrdma::transport::fake {

namespace {
Side other(Side s) { return s == kFirst ? kSecond : kFirst; }
}  // namespace

// ---- the network: links and their scripts ----

FakeStreamNetwork::~FakeStreamNetwork() { assert(endpoints_.empty()); }

std::unique_ptr<FakeStreams> FakeStreamNetwork::attach(const Gid& gid) {
  assert(!endpoints_.contains(gid));
  auto t = std::unique_ptr<FakeStreams>(new FakeStreams(*this, gid));
  endpoints_[gid] = t.get();
  return t;
}

void FakeStreamNetwork::detach(const Gid& gid) { endpoints_.erase(gid); }

FakeStreamNetwork::Joined FakeStreamNetwork::join(FakeStreams& first, FakeStreams& second) {
  auto l = std::make_unique<Link>();
  l->gids = {first.gid_, second.gid_};
  links_.push_back(std::move(l));
  const size_t id = links_.size() - 1;
  Joined joined{id, {next_fd_, next_fd_ + 1}};
  unadopted_[next_fd_++] = {id, kFirst};
  unadopted_[next_fd_++] = {id, kSecond};
  return joined;
}

// Bytes below the hold and the cut.
uint64_t FakeStreamNetwork::Flow::readable() const {
  const uint64_t limit = std::min(hold_at, cut_at);
  return std::min<uint64_t>(read + bytes.size(), limit) - std::min(read, limit);
}

// The writer's FIN or the cut was reached, every byte before it read, and no
// hold keeps the end back (a FIN or an RST follows the bytes on the wire).
bool FakeStreamNetwork::Flow::at_end() const {
  if (hold_at <= read) return false;
  return (cut_at != kNoOffset && read >= cut_at) || (fin && bytes.empty());
}

// At the end: whether it is a reset cut's (else a FIN's, the writer's or a cut's).
bool FakeStreamNetwork::Flow::reset() const {
  return cut == End::kReset && cut_at != kNoOffset && read >= cut_at;
}

void FakeStreamNetwork::hold(size_t id, Side from) {
  Flow& f = link(id).flows[from];
  f.hold_at = f.written;
}

void FakeStreamNetwork::release(size_t id, Side from) {
  link(id).flows[from].hold_at = kNoOffset;
  notify(link(id));
}

void FakeStreamNetwork::end_at(size_t id, Side from, uint64_t offset, End how) {
  Link& l = link(id);
  Flow& f = l.flows[from];
  f.cut_at = std::max(offset, f.read);
  f.cut = how;
  if (how == End::kReset && f.written >= f.cut_at && l.error[from] == 0)
    l.error[from] = ECONNRESET;
  notify(l);
}

void FakeStreamNetwork::drop(size_t id) {
  Link& l = link(id);
  for (Flow& f : l.flows) f.bytes.clear();
  l.error = {ECONNRESET, ECONNRESET};
  notify(l);
}

uint64_t FakeStreamNetwork::written(size_t id, Side from) const {
  return link(id).flows[from].written;
}

uint64_t FakeStreamNetwork::read(size_t id, Side from) const { return link(id).flows[from].read; }

void FakeStreamNetwork::notify(Link& l) {
  for (FakeStreams* end : l.ends)
    if (end != nullptr) end->signal();
}

// ---- one transport: the ends of links it holds ----

FakeStreams::FakeStreams(FakeStreamNetwork& network, const Gid& gid)
    : network_(network), gid_(gid), event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

FakeStreams::~FakeStreams() {
  while (!streams_.empty()) close(streams_.begin()->first, CloseMode::kNow);
  network_.detach(gid_);
  ::close(event_fd_);
}

void FakeStreams::signal() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof one);
}

StreamId FakeStreams::add(size_t link, Side side) {
  while (next_id_ == kNoStream || streams_.contains(next_id_)) ++next_id_;
  const StreamId id = next_id_++;
  streams_[id] = Endpoint{link, side};
  FakeStreamNetwork::Link& l = network_.link(link);
  l.ends[side] = this;
  l.ids[side] = id;
  return id;
}

int FakeStreams::listen(uint16_t port) {
  if (port == 0) port = uint16_t(40000 + listening_.size());
  if (listening_.contains(port)) return -EADDRINUSE;
  listening_[port] = true;
  return port;
}

void FakeStreams::stop_listening(uint16_t port) { listening_.erase(port); }

// The listener takes it at once (kAccepted at its next poll; kConnected at
// ours); no listener: refused at once, as a loopback RST would be.
StreamId FakeStreams::connect(const Gid& dst, uint16_t port, int& err) {
  auto it = network_.endpoints_.find(dst);
  if (it == network_.endpoints_.end() || !it->second->listening_.contains(port)) {
    err = ECONNREFUSED;
    return kNoStream;
  }
  FakeStreams& listener = *it->second;
  const FakeStreamNetwork::Joined joined = network_.join(*this, listener);
  network_.unadopted_.erase(joined.fds[0]);
  network_.unadopted_.erase(joined.fds[1]);
  const StreamId mine = add(joined.id, kFirst);
  const StreamId theirs = listener.add(joined.id, kSecond);
  news_.push_back(StreamEvent{mine, StreamEvent::kConnected, port, 0});
  listener.news_.push_back(StreamEvent{theirs, StreamEvent::kAccepted, port, 0});
  signal();
  listener.signal();
  return mine;
}

StreamId FakeStreams::adopt(int fd, int& err) {
  auto it = network_.unadopted_.find(fd);
  if (it == network_.unadopted_.end()) {
    err = EBADF;
    return kNoStream;
  }
  const auto [link, side] = it->second;
  network_.unadopted_.erase(it);
  return add(link, side);
}

// What a read would return something for: bytes, the end, or the reset.
bool FakeStreams::readable(const Endpoint& e) const {
  const FakeStreamNetwork::Flow& in = network_.link(e.link).flows[other(e.side)];
  return in.readable() > 0 || in.at_end();
}

size_t FakeStreams::poll(std::span<StreamEvent> events) {
  uint64_t count;
  [[maybe_unused]] ssize_t drained = ::read(event_fd_, &count, sizeof count);
  size_t n = 0;
  while (n < events.size() && !news_.empty()) {
    events[n++] = news_.front();
    news_.pop_front();
  }
  for (auto& [id, e] : streams_) {
    if (n == events.size()) break;
    FakeStreamNetwork::Link& l = network_.link(e.link);
    const FakeStreamNetwork::Flow& in = l.flows[other(e.side)];
    // The reader of a reset cut meets the RST once the bytes before it are read.
    if (l.error[e.side] == 0 && in.at_end() && in.reset()) l.error[e.side] = ECONNRESET;
    if (l.error[e.side] != 0) {
      if (!e.closed_reported)
        events[n++] = StreamEvent{id, StreamEvent::kClosed, 0, l.error[e.side]};
      e.closed_reported = true;
      continue;
    }
    if (readable(e)) events[n++] = StreamEvent{id, StreamEvent::kReadable, 0, 0};
    const bool room = l.flows[e.side].bytes.size() < network_.window_;
    if (e.want_writable && room && n < events.size()) {
      e.want_writable = false;
      events[n++] = StreamEvent{id, StreamEvent::kWritable, 0, 0};
    }
  }
  if (n == events.size()) signal();  // there may be more: the next poll looks
  return n;
}

ssize_t FakeStreams::read(StreamId stream, std::span<uint8_t> into) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return -EBADF;
  const Endpoint& e = it->second;
  FakeStreamNetwork::Link& l = network_.link(e.link);
  if (l.error[e.side] != 0) return -l.error[e.side];
  FakeStreamNetwork::Flow& in = l.flows[other(e.side)];
  const size_t n = size_t(std::min<uint64_t>(in.readable(), into.size()));
  if (n > 0) {
    std::copy_n(in.bytes.begin(), n, into.begin());
    in.bytes.erase(in.bytes.begin(), in.bytes.begin() + ptrdiff_t(n));
    in.read += n;
    network_.notify(l);  // the writer may have room again
    return ssize_t(n);
  }
  if (!in.at_end() || into.empty()) return 0;
  if (!in.reset()) return kEndOfStream;
  l.error[e.side] = ECONNRESET;
  return -ECONNRESET;
}

// Bytes the window takes. Those at or beyond a close cut are taken and fill the
// window, never to be read (the writer learns of the end from the peer's FIN, as
// over TCP toward a peer that stopped reading); a reset cut takes the bytes
// before it, then the write fails. A peer that closed drops what still arrives
// (as TcpStreams' closing streams do).
ssize_t FakeStreams::write(StreamId stream, std::span<const iovec> parts) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return -EBADF;
  const Endpoint& e = it->second;
  FakeStreamNetwork::Link& l = network_.link(e.link);
  if (l.error[e.side] != 0) return -l.error[e.side];
  FakeStreamNetwork::Flow& out = l.flows[e.side];
  const bool lost = l.closed[other(e.side)] || l.error[other(e.side)] != 0;
  size_t room = lost ? SIZE_MAX : network_.window_ - std::min(network_.window_, out.bytes.size());
  // A reset cut: the bytes before it leave, then the writer meets the RST.
  const bool resets = out.cut == End::kReset && out.cut_at != FakeStreamNetwork::kNoOffset;
  if (resets) room = size_t(std::min<uint64_t>(room, out.cut_at - std::min(out.written, out.cut_at)));
  size_t taken = 0;
  for (const iovec& part : parts) {
    const size_t n = std::min(part.iov_len, room - taken);
    const auto* bytes = static_cast<const uint8_t*>(part.iov_base);
    if (!lost) out.bytes.insert(out.bytes.end(), bytes, bytes + n);
    out.written += n;
    taken += n;
    if (taken == room) break;
  }
  if (resets && out.written >= out.cut_at) l.error[e.side] = ECONNRESET;
  if (taken > 0) network_.notify(l);
  return taken == 0 && l.error[e.side] != 0 ? -l.error[e.side] : ssize_t(taken);
}

void FakeStreams::want_writable(StreamId stream, bool want) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  it->second.want_writable = want;
  if (want) signal();
}

bool FakeStreams::waiting_for_room() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const auto& s) { return s.second.want_writable; });
}

// Both modes send the FIN at once: TcpStreams' wait for the peer's FIN
// (kAfterPeer) protects a peer that reads slowly, which a fake one never does.
// What still arrives is dropped, so the peer sees a FIN, not a reset.
void FakeStreams::close(StreamId stream, CloseMode) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  FakeStreamNetwork::Link& l = network_.link(it->second.link);
  const Side side = it->second.side;
  streams_.erase(it);
  l.closed[side] = true;
  l.ends[side] = nullptr;
  l.flows[side].fin = true;
  l.flows[other(side)].bytes.clear();
  network_.notify(l);
}

bool FakeStreams::peer_of(StreamId stream, Gid& address, uint16_t& port) const {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return false;
  address = network_.link(it->second.link).gids[other(it->second.side)];
  port = 0;
  return true;
}

std::string FakeStreams::describe() const {
  return "fake streams (" + std::to_string(streams_.size()) + " connections)";
}

}  // namespace softrdma::transport::fake
