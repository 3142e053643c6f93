#include "rdmacm/mad_port.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "rdmacm/verbs_private.h"

namespace softrdma::rdmacm {

namespace {

constexpr size_t kGrhBytes = 40;
constexpr size_t kSlotBytes = kGrhBytes + kMadBytes;
constexpr size_t kReceiveSlots = 128;

// The sender's GID from a UD receive's GRH (IBA 11.4.1.2): an IPv6 header, or for
// IPv4 an IPv4 header in the last 20 of the 40 bytes (RoCEv2, as Soft-RoCE and
// softrdma deliver it).
ibv_gid source_of(const uint8_t* grh) {
  ibv_gid gid{};
  if ((grh[0] >> 4) == 6) {
    std::memcpy(gid.raw, grh + 8, 16);
  } else {
    gid.raw[10] = gid.raw[11] = 0xff;
    std::memcpy(gid.raw + 12, grh + 20 + 12, 4);
  }
  return gid;
}

}  // namespace

std::unique_ptr<MadPort> MadPort::open(ibv_context* context, ibv_pd* pd) {
  std::unique_ptr<MadPort> port(new MadPort);
  if (int err = port->setup(context, pd)) {
    errno = err;
    return nullptr;
  }
  return port;
}

int MadPort::setup(ibv_context* context, ibv_pd* pd) {
  pd_ = pd;
  channel_ = ibv_create_comp_channel(context);
  if (channel_ == nullptr) return errno;
  // drain() takes the channel's event without blocking when there is none.
  fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
  cq_ = ibv_create_cq(context, int(kReceiveSlots) + 256, nullptr, channel_, 0);
  if (cq_ == nullptr) return errno;
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq_;
  init.qp_type = IBV_QPT_UD;
  init.cap.max_send_wr = 256;
  init.cap.max_recv_wr = kReceiveSlots;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = kMadBytes;
  qp_ = softrdma_create_gsi_qp(pd, &init);
  if (qp_ == nullptr) return errno;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qkey = kGsiQkey;
  if (int err = ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return err;
  attr.qp_state = IBV_QPS_RTR;
  if (int err = ibv_modify_qp(qp_, &attr, IBV_QP_STATE)) return err;
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  if (int err = ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN)) return err;
  buffers_.resize(kReceiveSlots * kSlotBytes);
  mr_ = ibv_reg_mr(pd, buffers_.data(), buffers_.size(), IBV_ACCESS_LOCAL_WRITE);
  if (mr_ == nullptr) return errno;
  for (size_t slot = 0; slot < kReceiveSlots; ++slot)
    if (int err = post_receive(slot)) return err;
  return ibv_req_notify_cq(cq_, 0);
}

MadPort::~MadPort() {
  for (auto& [key, ah] : ahs_) ibv_destroy_ah(ah);
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
}

int MadPort::post_receive(size_t slot) {
  ibv_sge sge{uint64_t(uintptr_t(buffers_.data() + slot * kSlotBytes)), uint32_t(kSlotBytes),
              mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp_, &wr, &bad);
}

void MadPort::drain(const Receiver& receive) {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  // Take the event if there is one (the channel is non-blocking only when read
  // after poll; the agent calls this when fd() is readable), then re-arm before
  // polling so that nothing arriving in between is missed.
  if (ibv_get_cq_event(channel_, &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
  ibv_req_notify_cq(cq_, 0);
  ibv_wc wcs[16];
  for (;;) {
    int n = ibv_poll_cq(cq_, 16, wcs);
    if (n <= 0) return;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.opcode != IBV_WC_RECV) continue;  // sends are unsignaled; flushes only at exit
      const uint8_t* slot = buffers_.data() + wc.wr_id * kSlotBytes;
      // A MAD is exactly 256 bytes (IBA 13.4.1); anything else is not one.
      if (wc.status == IBV_WC_SUCCESS && wc.byte_len == kSlotBytes)
        receive(source_of(slot), std::span<const uint8_t>(slot + kGrhBytes, kMadBytes));
      post_receive(wc.wr_id);
    }
  }
}

ibv_ah* MadPort::ah_for(const ibv_gid& destination, int sgid_index) {
  auto key = std::pair{destination, sgid_index};
  auto it = ahs_.find(key);
  if (it != ahs_.end()) return it->second;
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.grh.dgid = destination;
  attr.grh.sgid_index = uint8_t(sgid_index);
  attr.grh.hop_limit = 64;
  attr.port_num = 1;
  ibv_ah* ah = ibv_create_ah(pd_, &attr);
  if (ah != nullptr) ahs_.emplace(key, ah);
  return ah;
}

int MadPort::send(const ibv_gid& destination, int sgid_index, std::span<const uint8_t> mad) {
  ibv_ah* ah = ah_for(destination, sgid_index);
  if (ah == nullptr) return errno;
  ibv_sge sge{uint64_t(uintptr_t(mad.data())), uint32_t(mad.size()), 0};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_INLINE;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = 1;
  wr.wr.ud.remote_qkey = kGsiQkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp_, &wr, &bad);
}

}  // namespace softrdma::rdmacm
