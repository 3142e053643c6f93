// softrdma-fabric-switch: the test bed's bottleneck (docs/decisions/
// fabric-switch.md). Run in a router namespace whose FORWARD chain sends a
// direction's packets to NFQUEUE; each packet is held in the kernel until this
// program's model of a switch port (switch_queue.h) says it has crossed the link,
// then accepted (marked CE when the model marked it: the IP header's ECN field
// rewritten, its checksum with it) or dropped at once when the buffer is full.
//   softrdma-fabric-switch --queue 0 --rate-mbit 1000 --buffer-kb 128 --mark-kb 32
// SIGTERM or SIGINT: every held packet is accepted, and one line of statistics is
// printed ("fabric-switch: arrived ... dropped ... marked ...").
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sys/prctl.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <vector>

#include "fabric_switch/switch_queue.h"

namespace {

using softrdma::fabric::Nanos;
using softrdma::fabric::SwitchPort;
using softrdma::fabric::Verdict;

volatile std::sig_atomic_t g_stop = 0;

Nanos now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Nanos(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// RFC 3168 §5: the ECN field, the low two bits of IPv4's TOS / IPv6's traffic class.
int ecn_of(const uint8_t* ip, size_t len) {
  if (len < 2) return 0;
  if ((ip[0] >> 4) == 4) return ip[1] & 3;
  if ((ip[0] >> 4) == 6) return (ip[1] >> 4) & 3;
  return 0;
}

// Sets CE, and IPv4's header checksum (RFC 1071) anew.
void mark_ce(uint8_t* ip, size_t len) {
  if ((ip[0] >> 4) == 6) {
    ip[1] |= 0x30;
    return;
  }
  const size_t header = size_t(ip[0] & 0x0f) * 4;
  if (len < header || header < 20) return;
  ip[1] |= 3;
  ip[10] = ip[11] = 0;
  uint32_t sum = 0;
  for (size_t i = 0; i < header; i += 2) sum += uint32_t(ip[i]) << 8 | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const uint16_t check = uint16_t(~sum);
  ip[10] = uint8_t(check >> 8);
  ip[11] = uint8_t(check);
}

struct Held {
  uint32_t id;
  bool marked;
  std::vector<uint8_t> packet;  // the rewritten packet, when marked
};

struct Switch {
  explicit Switch(const softrdma::fabric::PortConfig& config) : port(config) {}
  SwitchPort port;
  std::deque<Held> held;  // in the port's order
  nfq_q_handle* queue = nullptr;

  void release_due(Nanos now) {
    while (!held.empty() && port.head_departure() <= now) {
      Held& h = held.front();
      if (h.marked)
        nfq_set_verdict(queue, h.id, NF_ACCEPT, uint32_t(h.packet.size()), h.packet.data());
      else
        nfq_set_verdict(queue, h.id, NF_ACCEPT, 0, nullptr);
      held.pop_front();
      port.depart();
    }
  }
};

int on_packet(nfq_q_handle* queue, nfgenmsg*, nfq_data* data, void* context) {
  auto& sw = *static_cast<Switch*>(context);
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(data);
  if (header == nullptr) return 0;
  const uint32_t id = ntohl(header->packet_id);
  unsigned char* payload = nullptr;
  const int len = nfq_get_payload(data, &payload);
  if (len <= 0) return nfq_set_verdict(queue, id, NF_ACCEPT, 0, nullptr);
  const int ecn = ecn_of(payload, size_t(len));
  // What left the link before this arrival no longer occupies the queue (a burst
  // read after a late wake-up must not count packets already sent).
  const Nanos now = now_ns();
  sw.release_due(now);
  const Verdict v = sw.port.arrive(uint32_t(len), ecn != 0, now);
  if (v == Verdict::kDrop) return nfq_set_verdict(queue, id, NF_DROP, 0, nullptr);
  Held h{id, v == Verdict::kQueueMarked, {}};
  if (h.marked) {
    h.packet.assign(payload, payload + len);
    mark_ce(h.packet.data(), h.packet.size());
  }
  sw.held.push_back(std::move(h));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"softrdma-fabric-switch: a switch port's queue (rate, buffer, ECN marking) on NFQUEUE"};
  unsigned queue_num = 0;
  uint64_t rate_mbit = 1000, buffer_kb = 128, mark_kb = 0;
  app.add_option("--queue", queue_num, "the NFQUEUE number the FORWARD rule names");
  app.add_option("--rate-mbit", rate_mbit, "the link's rate, Mbit/s")->check(CLI::Range(1, 1'000'000));
  app.add_option("--buffer-kb", buffer_kb, "the port's buffer, KiB")->check(CLI::Range(1, 1 << 20));
  app.add_option("--mark-kb", mark_kb, "CE-mark ECN-capable arrivals above this queue, KiB (0: never)");
  CLI11_PARSE(app, argc, argv);

  softrdma::fabric::PortConfig config;
  config.rate_bits_per_s = rate_mbit * 1'000'000;
  config.buffer_bytes = buffer_kb << 10;
  config.mark_bytes = mark_kb << 10;
  Switch sw(config);
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake-ups at the departures, not 50 us late
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGINT, [](int) { g_stop = 1; });

  nfq_handle* handle = nfq_open();
  if (handle == nullptr) {
    std::fprintf(stderr, "fabric-switch: nfq_open: %s\n", std::strerror(errno));
    return 1;
  }
  sw.queue = nfq_create_queue(handle, uint16_t(queue_num), on_packet, &sw);
  if (sw.queue == nullptr || nfq_set_mode(sw.queue, NFQNL_COPY_PACKET, 0xffff) < 0) {
    std::fprintf(stderr, "fabric-switch: cannot take queue %u: %s\n", queue_num, std::strerror(errno));
    return 1;
  }
  nfq_set_queue_maxlen(sw.queue, 16384);  // far beyond any buffer: the model drops, not the kernel
  nfnl_rcvbufsiz(nfq_nfnlh(handle), 16 << 20);
  const int fd = nfq_fd(handle);
  std::printf("fabric-switch: queue %u, %llu Mbit/s, buffer %llu KiB, marking above %llu KiB\n",
              queue_num, (unsigned long long)rate_mbit, (unsigned long long)buffer_kb,
              (unsigned long long)mark_kb);
  std::fflush(stdout);
  std::vector<char> buffer(1 << 17);
  while (!g_stop) {
    const Nanos now = now_ns();
    sw.release_due(now);
    const Nanos due = sw.port.head_departure();
    const Nanos wait = due == softrdma::fabric::kNoDeparture ? 100'000'000 : std::max<Nanos>(0, due - now);
    const timespec timeout{time_t(wait / 1'000'000'000), long(wait % 1'000'000'000)};
    pollfd p{fd, POLLIN, 0};
    if (ppoll(&p, 1, &timeout, nullptr) <= 0) continue;
    for (;;) {
      const ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n <= 0) break;  // EAGAIN; ENOBUFS: the kernel dropped what did not fit
      nfq_handle_packet(handle, buffer.data(), int(n));
    }
  }
  sw.release_due(softrdma::fabric::kNoDeparture - 1);
  const auto& s = sw.port.stats();
  std::printf("fabric-switch: arrived %llu bytes %llu dropped %llu marked %llu departed %llu "
              "max_queue_bytes %llu\n",
              (unsigned long long)s.arrived, (unsigned long long)s.arrived_bytes,
              (unsigned long long)s.dropped, (unsigned long long)s.marked,
              (unsigned long long)s.departed, (unsigned long long)s.max_queue_bytes);
  nfq_destroy_queue(sw.queue);
  nfq_close(handle);
  return 0;
}
