#include "traffic/fabric.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "runtime/node.h"
#include "transport/fake/fault_injector.h"

namespace softrdma::traffic {

std::unique_ptr<Fabric> Fabric::open(const FabricOptions& options, std::string& error) {
  std::unique_ptr<Fabric> f(new Fabric());
  if (!f->start(options, error)) return nullptr;
  return f;
}

bool Fabric::start(const FabricOptions& options, std::string& error) {
  runtime::Settings settings;
  settings.pcap_path = options.pcap;
  settings.faults = options.faults;
  node_ = runtime::Node::open(settings, error);
  if (!node_) return false;
  engine::Device& dev = node_->device();
  int err = 0;
  pd_ = dev.alloc_pd(err);
  if (pd_ != nullptr) send_cq_ = dev.create_cq(int(options.send_cqe), err);
  if (send_cq_ != nullptr) recv_cq_ = dev.create_cq(int(options.recv_cqe), err);
  if (recv_cq_ == nullptr) {
    error = std::string("device set-up (PD/CQ): ") + std::strerror(err);
    return false;
  }
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) {
    error = std::string("eventfd: ") + std::strerror(errno);
    return false;
  }
  const int efd = event_fd_;
  auto notify = [efd] {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(efd, &one, sizeof one);
  };
  send_cq_->set_notify(notify);
  recv_cq_->set_notify(notify);
  return true;
}

Fabric::~Fabric() {
  node_.reset();  // its CQs call the eventfd's notifier: close the fd after
  if (event_fd_ >= 0) close(event_fd_);
}

engine::Device& Fabric::device() { return node_->device(); }

transport::Gid Fabric::gid() const {
  const auto& gids = node_->device().gids();
  return gids.size() > 1 ? gids[1] : gids[0];
}

std::string Fabric::describe() const { return node_->transport().describe(); }

void Fabric::arm_notify() {
  send_cq_->arm(false);
  recv_cq_->arm(false);
}

void Fabric::drain_notify() {
  uint64_t v;
  [[maybe_unused]] ssize_t n = read(event_fd_, &v, sizeof v);
}

std::map<std::string, uint64_t> Fabric::counters() const {
  std::map<std::string, uint64_t> out;
  node_->device().counters().for_each([&](const char* name, uint64_t v) { out[name] = v; });
  const transport::TransportCounters t = node_->transport().counters();
  out["transport.tx_packets"] = t.tx_packets;
  out["transport.rx_packets"] = t.rx_packets;
  out["transport.tx_errors"] = t.tx_errors;
  out["transport.rx_bad_icrc"] = t.rx_bad_icrc;
  out["transport.rx_truncated"] = t.rx_truncated;
  if (transport::FaultInjector* faults = node_->faults()) {
    const transport::FaultCounters fc = faults->fault_counters();
    out["faults.tx_packets"] = fc.tx.packets;
    out["faults.tx_dropped"] = fc.tx.dropped;
    out["faults.tx_duplicated"] = fc.tx.duplicated;
    out["faults.tx_reordered"] = fc.tx.reordered;
    out["faults.tx_backlog_dropped"] = fc.tx.backlog_dropped;
  }
  return out;
}

}  // namespace softrdma::traffic
