#include "engine/iwarp/family.h"

#include <unistd.h>

#include <array>

#include "engine/device.h"
#include "engine/iwarp/connection.h"
#include "engine/qp.h"

namespace softrdma::engine::iwarp {

IwarpFamily::IwarpFamily(Device& device, transport::StreamTransport& streams)
    : device_(device), streams_(streams) {}

std::unique_ptr<Protocol> IwarpFamily::make_protocol(Qp& qp) {
  return std::make_unique<Connection>(qp, *this);
}

void IwarpFamily::forget(const Qp& qp) {
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (&it->second->qp() == &qp) {
      connections_.erase(it);
      return;
    }
  }
}

int IwarpFamily::adopt_connection(Qp& qp, const wire::iwarp::IwarpHandoff& handoff, Nanos now) {
  auto* connection = dynamic_cast<Connection*>(&qp.protocol());
  if (connection == nullptr || connection->stream() != transport::kNoStream ||
      qp.state() != IBV_QPS_INIT) {
    ::close(handoff.fd);
    return EINVAL;
  }
  int err = 0;
  const transport::StreamId stream = streams_.adopt(handoff.fd, err);
  if (stream == transport::kNoStream) return err;
  connections_[stream] = connection;
  connection->bind(stream, handoff, now);
  return 0;
}

void IwarpFamily::detach(transport::StreamId stream, transport::StreamTransport::CloseMode mode) {
  connections_.erase(stream);
  streams_.close(stream, mode);
}

namespace {
// With this many connections or fewer, a turn reads each stream itself: one recv
// per stream instead of epoll_wait and then recv. A poller's empty turn is then
// one system call, as a TCP program's busy poll is, and a message that arrives is
// taken one system call sooner (ib_send_lat -R; docs/decisions/iwarp.md).
constexpr size_t kDirectReads = 2;
// The epoll set is still looked at this often (closings, errors, a stream's
// room), and at every turn while a stream waits for room.
constexpr Nanos kEventCheck = 20'000;
}  // namespace

bool IwarpFamily::read_directly(Nanos now) {
  std::array<Connection*, kDirectReads> few;
  size_t n = 0;
  for (auto& [stream, c] : connections_) few[n++] = c;
  bool got = false;
  for (size_t i = 0; i < n; ++i) got |= few[i]->on_readable(now);  // may detach itself
  return got;
}

// Each event names a connection; one poll takes what is ready now, and a
// connection with more bytes than a turn reads is reported again (level-triggered).
bool IwarpFamily::receive(Nanos now, int bursts) {
  bool got = false;
  if (connections_.size() <= kDirectReads) {
    got = read_directly(now);
    if (now - last_event_check_ < kEventCheck && !streams_.waiting_for_room()) return got;
  }
  last_event_check_ = now;
  std::array<transport::StreamEvent, 64> events;
  for (int burst = 0; burst < bursts; ++burst) {
    const size_t n = streams_.poll(events);
    if (n == 0) break;
    got = true;
    for (size_t i = 0; i < n; ++i) {
      const transport::StreamEvent& e = events[i];
      auto it = connections_.find(e.stream);
      if (it == connections_.end()) {
        // accepted or left behind: no QP speaks on it
        streams_.close(e.stream, transport::StreamTransport::CloseMode::kNow);
        continue;
      }
      Connection& c = *it->second;
      switch (e.kind) {
        case transport::StreamEvent::kReadable: c.on_readable(now); break;
        case transport::StreamEvent::kWritable: c.on_writable(now); break;
        case transport::StreamEvent::kClosed: c.on_closed(e.error, now); break;
        default: break;
      }
    }
  }
  return got;
}

}  // namespace softrdma::engine::iwarp
