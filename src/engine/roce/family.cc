#include "engine/roce/family.h"

#include <algorithm>

#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/ud/datagram.h"

namespace softrdma::engine::roce {

RoceFamily::RoceFamily(Device& device, transport::Transport& primary)
    : device_(device), primary_(primary), tx_(device.counters()) {}

// IBA 9.8.4: UD is datagrams; RC, UC and XRC are connections (rc/connection.h).
std::unique_ptr<Protocol> RoceFamily::make_protocol(Qp& qp) {
  if (qp.type() == IBV_QPT_UD) return std::make_unique<ud::Datagram>(qp, tx_, primary_);
  return std::make_unique<rc::RcConnection>(qp, tx_, primary_);
}

FamilyMaker RoceFamily::maker() {
  return [](Device& device) { return std::make_unique<RoceFamily>(device, device.transport()); };
}

void RoceFamily::forget(const Qp& qp) {
  std::erase_if(touched_, [&](const RoceProtocol* p) { return p == &qp.protocol(); });
}

std::vector<int> RoceFamily::rx_fds() const {
  if (primary_.rx_fd() < 0) return {};
  return {primary_.rx_fd()};
}

}  // namespace softrdma::engine::roce
