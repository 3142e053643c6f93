// Byte-stream transport, beside the datagram one (transport.h): TCP connections
// for the iWARP family (RFC 5044: MPA runs over TCP; docs/decisions/
// protocol-families.md). The engine never blocks on it: each turn it polls for
// what happened (a connection accepted, completed, readable or closed), reads
// what is there, and writes what the kernel takes now. One descriptor, rx_fd(),
// becomes readable whenever poll() has something, so the progress loop sleeps on
// it as on a datagram transport's socket.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdint>
#include <span>
#include <string>

#include "wire/ip_udp.h"

namespace softrdma::transport {

using wire::Gid;

using StreamId = uint32_t;  // 0 names no stream
inline constexpr StreamId kNoStream = 0;

struct StreamEvent {
  enum Kind : uint8_t {
    kAccepted,   // a listener took a new connection: `stream` is it, `port` the listener's
    kConnected,  // a connect() completed
    kReadable,   // read() has bytes, or will report the end (until they are read)
    kClosed,     // a connect() failed, or the connection broke: `error`
    kWritable,   // a stream watched by want_writable() can take bytes again
  };
  StreamId stream = kNoStream;
  Kind kind = kReadable;
  uint16_t port = 0;
  int error = 0;  // kClosed: the errno (ECONNREFUSED, ECONNRESET, ETIMEDOUT ...)
};

// read()'s answer when the peer closed its side and every byte was read.
inline constexpr ssize_t kEndOfStream = -EPIPE;

class StreamTransport {
 public:
  virtual ~StreamTransport() = default;

  // Takes connections on this transport's address at `port` (0: one the kernel
  // picks). Returns the port, or a negative errno (-EADDRINUSE ...).
  virtual int listen(uint16_t port) = 0;
  virtual void stop_listening(uint16_t port) = 0;
  // Starts a connection to `dst`:`port`; it is usable after kConnected. Returns
  // its id, or kNoStream with `err` when it cannot even start.
  virtual StreamId connect(const Gid& dst, uint16_t port, int& err) = 0;
  // Up to events.size() events, without blocking. A readable stream is reported
  // at every poll until its bytes are read (level-triggered).
  virtual size_t poll(std::span<StreamEvent> events) = 0;
  // Up to into.size() of the bytes that arrived; 0 when none has yet;
  // kEndOfStream after the peer's close; another negative errno when it broke.
  virtual ssize_t read(StreamId stream, std::span<uint8_t> into) = 0;
  // As much of `parts`, in order, as the kernel takes now (0: none; TCP's flow
  // control holds the rest); a negative errno when the connection broke.
  virtual ssize_t write(StreamId stream, std::span<const iovec> parts) = 0;
  // Takes a connected socket someone else made (a connection manager that ran the
  // protocol's start-up on it); its id, or kNoStream with `err` (the descriptor is
  // closed then).
  virtual StreamId adopt(int fd, int& err) = 0;
  // Whether poll() reports kWritable once the stream can take bytes (after a
  // write() that took less than it was given); reported once, then unwatched.
  virtual void want_writable(StreamId stream, bool want) = 0;
  // Whether any stream waits for kWritable.
  virtual bool waiting_for_room() const = 0;
  // How close() ends a connection. kNow: this side's FIN leaves at once (after an
  // error, a Terminate, or the peer's own close). kAfterPeer: a disconnect of a
  // connection that is still up; the FIN waits for the peer's, or for the peer to
  // fall quiet, or a bound (why: tcp_streams.cc). Either way what still arrives is
  // read and dropped, so the end is a FIN and not a reset.
  enum class CloseMode : uint8_t { kNow, kAfterPeer };
  // Closes the connection (an unknown id is ignored); its id is not reused soon.
  virtual void close(StreamId stream, CloseMode mode) = 0;
  // The remote address and port of a connection; false for an unknown id.
  virtual bool peer_of(StreamId stream, Gid& address, uint16_t& port) const = 0;

  virtual Gid local_gid() const = 0;
  virtual int rx_fd() const = 0;
  virtual std::string describe() const = 0;
};

}  // namespace softrdma::transport
