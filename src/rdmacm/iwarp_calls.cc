// The application's side of rdma_cm over iWARP (iwarp_cm.h): rdma_listen,
// rdma_connect, rdma_accept, rdma_reject, rdma_disconnect and rdma_destroy_id
// of an id on an iWARP device, under the agent's cm_mutex (cm_calls.cc, ids.cc
// call in); and the events they and the agent's thread deliver.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rdmacm/address.h"
#include "rdmacm/cm.h"
#include "rdmacm/iwarp_cm.h"

namespace softrdma::rdmacm {

namespace {

// SOFTRDMA_MPA_CRC=1: the initiator asks for the FPDU CRC (RFC 5044 §7.1: C).
// Off by default, as siw's mpa_crc_required; a peer that asks gets it anyway.
bool crc_requested() {
  static const bool on = [] {
    const char* v = std::getenv("SOFTRDMA_MPA_CRC");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

ibv_device_attr device_attr(const CmId& id) {
  ibv_device_attr attr{};
  ibv_query_device(id.ibv.verbs, &attr);
  return attr;
}

// siw's sockets: a port in TIME_WAIT may be bound again; no Nagle delay for
// start frames and FPDUs.
int tcp_socket(int family) {
  const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// The id's source address and port (its rdma_cm reservation's); a port some
// other TCP socket of the host holds falls back to an ephemeral one.
int bind_source(int fd, const CmId& id) {
  auto source = IpEndpoint::from(&id.ibv.route.addr.src_addr);
  if (!source) return EINVAL;
  if (bind(fd, source->get(), source->length()) == 0) return 0;
  if (errno != EADDRINUSE) return errno;
  source->set_port(0);
  return bind(fd, source->get(), source->length()) == 0 ? 0 : errno;
}

int handoff(CmId& id, int fd, bool initiator) {
  const iwarp::Agreement& a = id.iwarp.agreed;
  wire::iwarp::IwarpHandoff h;
  h.fd = fd;
  h.crc = a.crc;
  h.initiator = initiator;
  h.rtr = a.rtr;
  h.ird = a.ird;
  h.ord = a.ord;
  return iwarp_attach(id.ibv.qp, h);  // the engine's fd, also on failure
}

void answered(CmId& id) {
  if (id.listener != nullptr && id.listener->pending_requests > 0) --id.listener->pending_requests;
}

}  // namespace

void deliver_iwarp(CmId& id, rdma_cm_event_type type, int status,
                   const iwarp::StartFrameReader* frame, uint16_t responder_resources,
                   uint16_t initiator_depth) {
  Event* event = new_event(id, type, status);
  rdma_conn_param& p = event->ibv.param.conn;
  if (frame != nullptr) {
    // The ULP's private data (after RFC 6581's IRD/ORD word), as siw hands it up;
    // rdma_conn_param counts it in a byte.
    const auto data = frame->frame().private_data;
    const size_t n = std::min<size_t>(data.size(), 255);
    if (n != 0) std::memcpy(event->private_data, data.data(), n);
    p.private_data = event->private_data;
    p.private_data_len = uint8_t(n);
  }
  p.responder_resources = uint8_t(std::min<uint16_t>(responder_resources, 255));
  p.initiator_depth = uint8_t(std::min<uint16_t>(initiator_depth, 255));
  if (type == RDMA_CM_EVENT_CONNECT_REQUEST && id.listener != nullptr)
    event->ibv.listen_id = &id.listener->ibv;
  post(id, event);
}

// rdma_listen(3) on an iWARP device: a TCP listener on the id's address and port
// (the rdma_cm reservation stays, so rdma_cm's port rules hold too).
int IwarpCm::listen(CmId& id, int backlog) {
  auto address = IpEndpoint::from(&id.ibv.route.addr.src_addr);
  if (!address) return EINVAL;
  const int fd = tcp_socket(address->family());
  if (fd < 0) return errno;
  if (address->family() == AF_INET6) {
    const int zero = 0;  // RDMA_OPTION_ID_AFONLY's default: IPv4 peers too
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  }
  if (bind(fd, address->get(), address->length()) != 0 || ::listen(fd, backlog) != 0) {
    const int err = errno;
    close(fd);
    return err;
  }
  id.iwarp.phase = IwarpPhase::kListening;
  id.iwarp.fd = fd;
  Socket socket;
  socket.role = Role::kListener;
  socket.id = &id;
  watch(fd, EPOLLIN, std::move(socket));
  return 0;
}

// rdma_connect(3): a non-blocking TCP connect from the id's address; the agent's
// thread sends the MPA request once it is up (RFC 6581 §5: revision 2, this
// side's IRD/ORD from responder_resources/initiator_depth, peer-to-peer with a
// zero-length WRITE or READ as the RTR).
int IwarpCm::connect(CmId& id, const rdma_conn_param& param) {
  if (id.state != IdState::kRouteResolved) return EINVAL;
  if (param.private_data_len > iwarp::kMaxUlpData) return EINVAL;
  if (id.ibv.qp == nullptr) return EINVAL;  // the engine attaches the id's own QP
  auto destination = IpEndpoint::from(&id.ibv.route.addr.dst_addr);
  if (!destination) return EINVAL;
  IwarpConnection& c = id.iwarp;
  const ibv_device_attr device = device_attr(id);
  c.offer.ird = uint16_t(std::min<int>(param.responder_resources, device.max_qp_rd_atom));
  c.offer.ord = uint16_t(std::min<int>(param.initiator_depth, device.max_qp_init_rd_atom));
  c.offer.crc = crc_requested();
  c.offer.peer_to_peer = true;
  if (c.offer.ord == 0) c.offer.ord = 1;  // siw: the RTR may be a READ
  const std::span<const uint8_t> data(static_cast<const uint8_t*>(param.private_data),
                                      param.private_data_len);
  c.request_bytes = iwarp::write_request(c.offer, data, c.request);
  c.peer_frame = iwarp::StartFrameReader(/*reply=*/true);
  const int fd = tcp_socket(destination->family());
  if (fd < 0) return errno;
  if (int err = bind_source(fd, id)) {
    close(fd);
    return err;
  }
  ids_.insert(&id);
  id.state = IdState::kConnecting;
  c.fd = fd;
  c.phase = IwarpPhase::kConnecting;
  if (::connect(fd, destination->get(), destination->length()) != 0 && errno != EINPROGRESS) {
    fail(id, -errno);  // refused at once (loopback): the event, as a later refusal's
    return 0;
  }
  Socket socket;
  socket.role = Role::kActive;
  socket.id = &id;
  watch(fd, EPOLLOUT, std::move(socket));
  return 0;
}

// rdma_accept(3): the MPA reply (RFC 6581 §5: the RTR kind chosen from those
// offered, the depths clamped; CRC as requested), then the engine takes the
// socket and the connection is ESTABLISHED. The engine holds the responder's
// sends until the initiator's RTR arrives (wire/iwarp/handoff.h).
int IwarpCm::accept(CmId& id, const rdma_conn_param* param) {
  IwarpConnection& c = id.iwarp;
  if (c.phase != IwarpPhase::kRequestReceived) return EINVAL;
  const size_t limit = c.peer_frame.enhanced() ? iwarp::kMaxUlpData : iwarp::kMaxPrivateData;
  if (param != nullptr && param->private_data_len > limit) return EINVAL;
  if (id.ibv.qp == nullptr) return EINVAL;
  const ibv_device_attr device = device_attr(id);
  const auto& e = c.peer_frame.frame().enhanced;
  // With no parameters, the depths CONNECT_REQUEST presented (rdma-core's rdma_accept).
  const uint16_t ird = param != nullptr ? param->responder_resources : (e ? e->ord : 0);
  const uint16_t ord = param != nullptr ? param->initiator_depth : (e ? e->ird : 0);
  c.agreed = iwarp::answer(c.peer_frame, ird, ord, uint16_t(device.max_qp_rd_atom),
                           uint16_t(device.max_qp_init_rd_atom));
  std::array<uint8_t, iwarp::kMaxFrameBytes> out;
  const std::span<const uint8_t> data(
      param != nullptr ? static_cast<const uint8_t*>(param->private_data) : nullptr,
      param != nullptr ? param->private_data_len : 0);
  const size_t n = iwarp::write_reply(c.peer_frame, c.agreed, data, out);
  answered(id);
  const int fd = c.fd;
  c.fd = -1;
  c.phase = IwarpPhase::kClosed;
  // The reply first: FPDUs the initiator sends behind it wait in the socket
  // until the engine reads them.
  if (int err = iwarp::send_frame(fd, std::span(out).first(n))) {
    close(fd);
    return err;
  }
  if (int err = handoff(id, fd, /*initiator=*/false)) return err;
  c.phase = IwarpPhase::kEstablished;
  deliver_iwarp(id, RDMA_CM_EVENT_ESTABLISHED, 0, nullptr, c.agreed.ird, c.agreed.ord);
  return 0;
}

// rdma_reject(3): the reply with R and the private data (RFC 5044 §7.1), then
// the connection closes; the initiator's REJECTED carries that private data.
int IwarpCm::reject(CmId& id, const void* private_data, uint8_t length) {
  IwarpConnection& c = id.iwarp;
  if (c.phase != IwarpPhase::kRequestReceived) return EINVAL;
  const size_t limit = c.peer_frame.enhanced() ? iwarp::kMaxUlpData : iwarp::kMaxPrivateData;
  if (length > limit) return EINVAL;
  std::array<uint8_t, iwarp::kMaxFrameBytes> out;
  const size_t n = iwarp::write_reject(
      c.peer_frame, std::span(static_cast<const uint8_t*>(private_data), length), out);
  answered(id);
  iwarp::send_frame(c.fd, std::span(out).first(n));
  close(c.fd);
  c.fd = -1;
  c.phase = IwarpPhase::kClosed;
  return 0;
}

// rdma_disconnect(3): the QP to Error, which makes the engine close the TCP
// stream (the peer's engine sees it end: its DISCONNECTED); ours at once, as
// rdma_disconnect on the IB path delivers it.
int IwarpCm::disconnect(CmId& id) {
  IwarpConnection& c = id.iwarp;
  switch (c.phase) {
    case IwarpPhase::kEstablished:
      qp_to_error(id);
      c.phase = IwarpPhase::kClosed;
      deliver_iwarp(id, RDMA_CM_EVENT_DISCONNECTED, 0, nullptr, 0, 0);
      return 0;
    case IwarpPhase::kClosed:  // the peer ended it first: nothing more to say
      qp_to_error(id);
      return 0;
    case IwarpPhase::kNone:
    case IwarpPhase::kListening:
    case IwarpPhase::kConnecting:
    case IwarpPhase::kAwaitingReply:
    case IwarpPhase::kRequestReceived: return EINVAL;
  }
  return EINVAL;
}

void IwarpCm::forget(CmId& id) {
  std::vector<int> mine;
  for (auto& [fd, socket] : sockets_)
    if (socket.id == &id) mine.push_back(fd);
  for (int fd : mine) retire(fd);  // listener, its pending requests, an active connect
  IwarpConnection& c = id.iwarp;
  if (c.phase == IwarpPhase::kRequestReceived && c.fd >= 0) {
    close(c.fd);  // never in the epoll since its request was read
    answered(id);
  }
  if (c.phase == IwarpPhase::kEstablished) qp_to_error(id);  // the stream closes
  c.fd = -1;
  c.phase = IwarpPhase::kClosed;
  for (CmId* other : ids_)
    if (other->listener == &id) other->listener = nullptr;
  ids_.erase(&id);
}

const char* to_string(IwarpPhase phase) {
  switch (phase) {
    case IwarpPhase::kNone: return "none";
    case IwarpPhase::kListening: return "listening";
    case IwarpPhase::kConnecting: return "connecting";
    case IwarpPhase::kAwaitingReply: return "awaiting reply";
    case IwarpPhase::kRequestReceived: return "request received";
    case IwarpPhase::kEstablished: return "established";
    case IwarpPhase::kClosed: return "closed";
  }
  return "?";
}

}  // namespace softrdma::rdmacm
