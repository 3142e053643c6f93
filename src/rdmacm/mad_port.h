// QP1 of the device for the Communication Manager (IBA 13.5.1, 12.11): MADs are
// UD SENDs of 256 bytes to QP1 with the GSI Q_Key 0x80010000, answered to the
// GID they came from (RoCEv2: the source IP, given by the receive's GRH).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace softrdma::rdmacm {

inline constexpr size_t kMadBytes = 256;
inline constexpr uint32_t kGsiQkey = 0x80010000;

// Orders (GID, number) keys of maps: ibv_gid has no operator< of its own.
struct GidKeyLess {
  template <typename T>
  bool operator()(const std::pair<ibv_gid, T>& a, const std::pair<ibv_gid, T>& b) const {
    int order = std::memcmp(a.first.raw, b.first.raw, sizeof a.first.raw);
    return order < 0 || (order == 0 && a.second < b.second);
  }
};

class MadPort {
 public:
  // QP1 on `context` with its own CQ and completion channel; null with errno
  // (EBUSY: the process has one already).
  static std::unique_ptr<MadPort> open(ibv_context* context, ibv_pd* pd);
  ~MadPort();

  // The completion channel's descriptor: readable when MADs may have arrived.
  int fd() const { return channel_->fd; }

  using Receiver = std::function<void(const ibv_gid& source, std::span<const uint8_t> mad)>;
  // Hands each MAD that arrived to `receive` and re-arms the channel. Call when
  // fd() is readable (or at any time: it does not block).
  void drain(const Receiver& receive);

  // Sends a MAD to QP1 of `destination` from this device's GID `sgid_index`.
  // Returns 0 or an errno; the MAD is copied (inline) before it returns.
  int send(const ibv_gid& destination, int sgid_index, std::span<const uint8_t> mad);

  MadPort(const MadPort&) = delete;
  MadPort& operator=(const MadPort&) = delete;

 private:
  MadPort() = default;
  int setup(ibv_context* context, ibv_pd* pd);
  int post_receive(size_t slot);
  ibv_ah* ah_for(const ibv_gid& destination, int sgid_index);

  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> buffers_;  // receive slots: 40-byte GRH + a MAD each
  std::map<std::pair<ibv_gid, int>, ibv_ah*, GidKeyLess> ahs_;
};

}  // namespace softrdma::rdmacm
