// rdma_getaddrinfo(3) / rdma_freeaddrinfo(3): names and services through the
// system resolver (getaddrinfo(3)), as rdma-core does, with the rdma_cm fields
// (port space, QP type) from the hints. One result, the resolver's first: what
// rdma_create_ep(3) and rping use.
#include <netdb.h>

#include <cstdlib>
#include <cstring>

#include "rdmacm/cm.h"

namespace {

sockaddr* copy_address(const sockaddr* addr, socklen_t length) {
  auto* copy = static_cast<sockaddr*>(malloc(length));
  if (copy != nullptr) std::memcpy(copy, addr, length);
  return copy;
}

void defaults_from_hints(const rdma_addrinfo* hints, rdma_addrinfo& out) {
  out.ai_port_space = RDMA_PS_TCP;
  out.ai_qp_type = IBV_QPT_RC;
  if (hints == nullptr) return;
  out.ai_flags = hints->ai_flags;
  if (hints->ai_port_space != 0) out.ai_port_space = hints->ai_port_space;
  else if (hints->ai_qp_type == IBV_QPT_UD) out.ai_port_space = RDMA_PS_UDP;
  if (hints->ai_qp_type != 0) out.ai_qp_type = hints->ai_qp_type;
  else if (out.ai_port_space == RDMA_PS_UDP) out.ai_qp_type = IBV_QPT_UD;
}

}  // namespace

SOFTRDMA_CM_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}

// No name and no service: the addresses the hints carry (rdma_getaddrinfo(3):
// "hints ... ai_src_addr / ai_dst_addr"), as pyverbs asks for a source alone.
static int from_hints_only(const rdma_addrinfo& hints, rdma_addrinfo** res) {
  if (hints.ai_src_addr == nullptr && hints.ai_dst_addr == nullptr)
    return softrdma::rdmacm::fail(EINVAL);
  auto* out = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (out == nullptr) return softrdma::rdmacm::fail(ENOMEM);
  defaults_from_hints(&hints, *out);
  if (hints.ai_src_addr != nullptr) {
    out->ai_src_addr = copy_address(hints.ai_src_addr, hints.ai_src_len);
    out->ai_src_len = hints.ai_src_len;
    out->ai_family = hints.ai_src_addr->sa_family;
  }
  if (hints.ai_dst_addr != nullptr) {
    out->ai_dst_addr = copy_address(hints.ai_dst_addr, hints.ai_dst_len);
    out->ai_dst_len = hints.ai_dst_len;
    out->ai_family = hints.ai_dst_addr->sa_family;
  }
  if ((hints.ai_src_addr != nullptr && out->ai_src_addr == nullptr) ||
      (hints.ai_dst_addr != nullptr && out->ai_dst_addr == nullptr)) {
    rdma_freeaddrinfo(out);
    return softrdma::rdmacm::fail(ENOMEM);
  }
  *res = out;
  return 0;
}

// Returns 0, getaddrinfo(3)'s EAI_* code for a name it cannot resolve (as
// rdma-core passes it through, for gai_strerror), or -1 with errno.
SOFTRDMA_CM_EXPORT int rdma_getaddrinfo(const char* node, const char* service,
                                        const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (res == nullptr) return softrdma::rdmacm::fail(EINVAL);
  if (node == nullptr && service == nullptr)
    return hints != nullptr ? from_hints_only(*hints, res) : softrdma::rdmacm::fail(EINVAL);
  const bool passive = hints != nullptr && (hints->ai_flags & RAI_PASSIVE);
  addrinfo system_hints{};
  system_hints.ai_socktype = SOCK_STREAM;
  if (passive) system_hints.ai_flags |= AI_PASSIVE;
  if (hints != nullptr && (hints->ai_flags & RAI_NUMERICHOST)) system_hints.ai_flags |= AI_NUMERICHOST;
  if (hints != nullptr && (hints->ai_flags & RAI_FAMILY)) system_hints.ai_family = hints->ai_family;
  addrinfo* found = nullptr;
  if (int err = getaddrinfo(node, service, &system_hints, &found)) return err;

  auto* out = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (out == nullptr) {
    freeaddrinfo(found);
    return softrdma::rdmacm::fail(ENOMEM);
  }
  defaults_from_hints(hints, *out);
  out->ai_family = found->ai_family;
  sockaddr* address = copy_address(found->ai_addr, found->ai_addrlen);
  if (passive) {
    out->ai_src_addr = address;
    out->ai_src_len = found->ai_addrlen;
  } else {
    out->ai_dst_addr = address;
    out->ai_dst_len = found->ai_addrlen;
    if (hints != nullptr && hints->ai_src_addr != nullptr) {
      out->ai_src_addr = copy_address(hints->ai_src_addr, hints->ai_src_len);
      out->ai_src_len = hints->ai_src_len;
    }
  }
  freeaddrinfo(found);
  if (address == nullptr) {
    rdma_freeaddrinfo(out);
    return softrdma::rdmacm::fail(ENOMEM);
  }
  *res = out;
  return 0;
}
