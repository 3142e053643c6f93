#include "traffic/fabric.h"

#include <arpa/inet.h>
#include <fcntl.h>

#include <cerrno>
#include <cstring>

namespace softrdma::traffic {

namespace {

std::string failed(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

std::unique_ptr<Fabric> Fabric::open(const FabricOptions& options, std::string& error) {
  std::unique_ptr<Fabric> f(new Fabric());
  if (!f->start(options, error)) return nullptr;
  return f;
}

bool Fabric::start(const FabricOptions& options, std::string& error) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr || count == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    error = "no verbs device (run the tool with `softrdma run --` or LD_LIBRARY_PATH=build/lib)";
    return false;
  }
  device_name_ = ibv_get_device_name(list[0]);
  context_ = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (context_ == nullptr) {
    error = failed("ibv_open_device");
    return false;
  }
  if (ibv_query_port(context_, 1, &port_) != 0) {
    error = failed("ibv_query_port");
    return false;
  }
  ibv_gid gid{};
  gid_index_ = port_.gid_tbl_len > 1 ? 1 : 0;
  if (ibv_query_gid(context_, 1, gid_index_, &gid) != 0) {
    error = failed("ibv_query_gid");
    return false;
  }
  std::memcpy(gid_.data(), gid.raw, gid_.size());
  pd_ = ibv_alloc_pd(context_);
  channel_ = pd_ ? ibv_create_comp_channel(context_) : nullptr;
  if (channel_ == nullptr) {
    error = failed(pd_ ? "ibv_create_comp_channel" : "ibv_alloc_pd");
    return false;
  }
  // Non-blocking, so drain_notify() can take every pending event and stop.
  fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
  send_cq_ = ibv_create_cq(context_, int(options.send_cqe), nullptr, channel_, 0);
  recv_cq_ = send_cq_ ? ibv_create_cq(context_, int(options.recv_cqe), nullptr, channel_, 0)
                      : nullptr;
  if (recv_cq_ == nullptr) {
    error = failed("ibv_create_cq");
    return false;
  }
  if (options.srq_wr > 0) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = options.srq_wr;
    init.attr.max_sge = options.srq_sge;
    srq_ = ibv_create_srq(pd_, &init);
    if (srq_ == nullptr) {
      error = failed("ibv_create_srq");
      return false;
    }
  }
  return true;
}

Fabric::~Fabric() {
  if (srq_ != nullptr) ibv_destroy_srq(srq_);
  if (recv_cq_ != nullptr) ibv_destroy_cq(recv_cq_);
  if (send_cq_ != nullptr) ibv_destroy_cq(send_cq_);
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (context_ != nullptr) ibv_close_device(context_);
}

std::string Fabric::describe() const {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid_.data(), text, sizeof text);
  return "device " + device_name_ + ", GID[" + std::to_string(gid_index_) + "] " + text +
         ", active MTU " + std::to_string(128 << port_.active_mtu);
}

bool Fabric::arm_notify() {
  return ibv_req_notify_cq(send_cq_, 0) == 0 && ibv_req_notify_cq(recv_cq_, 0) == 0;
}

void Fabric::drain_notify() {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  // ibv_get_cq_event(3): every event taken must be acknowledged before the CQ is
  // destroyed; acknowledging one at a time is cheap here (few events).
  while (ibv_get_cq_event(channel_, &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
}

}  // namespace softrdma::traffic
