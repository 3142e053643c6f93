#include "traffic/oob.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace softrdma::traffic {

namespace {

constexpr size_t kHeaderBytes = 5;  // u32 payload length, u8 type
constexpr uint32_t kMaxPayload = 64u << 20;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Encoder& Encoder::raw(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  buf_.insert(buf_.end(), b, b + n);
  return *this;
}

Encoder& Encoder::str(const std::string& s) {
  u32(uint32_t(s.size()));
  return raw(s.data(), s.size());
}

void Decoder::raw(void* p, size_t n) {
  if (!ok_ || buf_.size() - pos_ < n) {
    ok_ = false;
    std::memset(p, 0, n);
    return;
  }
  std::memcpy(p, buf_.data() + pos_, n);
  pos_ += n;
}

std::string Decoder::str() {
  const uint32_t n = u32();
  if (!ok_ || buf_.size() - pos_ < n) {
    ok_ = false;
    return {};
  }
  std::string s(reinterpret_cast<const char*>(buf_.data() + pos_), n);
  pos_ += n;
  return s;
}

OobChannel::OobChannel(int fd) : fd_(fd) {
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // fails harmlessly on AF_UNIX
}

OobChannel::~OobChannel() {
  if (fd_ >= 0) close(fd_);
}

void OobChannel::send(MsgType type, const Encoder& payload) {
  const uint32_t len = uint32_t(payload.data().size());
  const auto* l = reinterpret_cast<const uint8_t*>(&len);
  out_.insert(out_.end(), l, l + 4);
  out_.push_back(static_cast<uint8_t>(type));
  out_.insert(out_.end(), payload.data().begin(), payload.data().end());
}

bool OobChannel::flush() {
  while (out_pos_ < out_.size()) {
    const ssize_t n = ::send(fd_, out_.data() + out_pos_, out_.size() - out_pos_, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      closed_ = true;  // the peer is gone; what it no longer reads does not matter
      out_.clear();
      out_pos_ = 0;
      return true;
    }
    if (n <= 0) {
      error_ = errno_text("out-of-band send");
      return false;
    }
    out_pos_ += size_t(n);
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  }
  return true;
}

bool OobChannel::receive() {
  uint8_t buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      closed_ = true;
      error_ = "the peer closed the out-of-band connection";
      return true;
    }
    if (n < 0) {
      error_ = errno_text("out-of-band recv");
      return false;
    }
    in_.insert(in_.end(), buf, buf + n);
  }
}

std::optional<Frame> OobChannel::next() {
  if (in_.size() < kHeaderBytes) return std::nullopt;
  uint32_t len = 0;
  std::memcpy(&len, in_.data(), 4);
  if (len > kMaxPayload) {
    error_ = "out-of-band frame too long: " + std::to_string(len);
    in_.clear();
    return Frame{MsgType::kFail, {}};
  }
  if (in_.size() < kHeaderBytes + len) return std::nullopt;
  Frame f;
  f.type = static_cast<MsgType>(in_[4]);
  f.payload.assign(in_.begin() + kHeaderBytes, in_.begin() + kHeaderBytes + len);
  in_.erase(in_.begin(), in_.begin() + kHeaderBytes + len);
  return f;
}

std::optional<Frame> OobChannel::wait_frame(int timeout_ms) {
  const int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    if (auto f = next()) return f;
    if (!flush() || !receive()) return std::nullopt;
    if (auto f = next()) return f;
    if (closed_) return std::nullopt;
    const int64_t left = deadline - now_ms();
    if (left <= 0) {
      error_ = "out-of-band: timed out waiting for the peer";
      return std::nullopt;
    }
    pollfd p{fd_, short(POLLIN | (wants_write() ? POLLOUT : 0)), 0};
    poll(&p, 1, int(std::min<int64_t>(left, 1000)));
  }
}

bool OobChannel::drain(int timeout_ms) {
  const int64_t deadline = now_ms() + timeout_ms;
  while (wants_write()) {
    if (!flush()) return false;
    const int64_t left = deadline - now_ms();
    if (left <= 0) return false;
    if (!wants_write()) break;
    pollfd p{fd_, POLLOUT, 0};
    poll(&p, 1, int(std::min<int64_t>(left, 1000)));
  }
  return true;
}

int OobChannel::listen_and_accept(uint16_t port, int timeout_ms, std::string& error) {
  const int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0) {
    error = errno_text("socket");
    return -1;
  }
  const int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  // Every address: the client may be on another host (two network namespaces in
  // tests/conformance/lossy_fabric.sh); the channel carries no secret, and the
  // first peer to connect is the one served.
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  int fd = -1;
  if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(ls, 1) != 0) {
    error = errno_text(("listen on port " + std::to_string(port)).c_str());
  } else {
    pollfd p{ls, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) == 1) fd = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) error = "no peer connected to 127.0.0.1:" + std::to_string(port);
  }
  close(ls);
  return fd;
}

int OobChannel::connect_to(const std::string& host, uint16_t port, int timeout_ms,
                           std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    error = "resolve " + host + ": " + gai_strerror(rc);
    return -1;
  }
  const int64_t deadline = now_ms() + timeout_ms;
  int fd = -1;
  // The server may not listen yet: retry until the timeout.
  while (fd < 0 && now_ms() < deadline) {
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a retry's pace, bounded
    }
  }
  freeaddrinfo(res);
  if (fd < 0) error = "could not connect to " + host + ":" + std::to_string(port);
  return fd;
}

}  // namespace softrdma::traffic
