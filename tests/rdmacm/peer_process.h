// rdmacm_test_peer (peer.cc) as a child process of a PeerDeath test: its stdout
// read line by line, and the signals that kill, stop or resume it; and the
// server's end of its rdma_cm connection.
#pragma once

#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "rdmacm/rdmacm_fixture.h"

namespace softrdma::rdmacm::testing {

class PeerProcess {
 public:
  // rdmacm_test_peer MODE 127.0.0.1 PORT.
  PeerProcess(const char* mode, uint16_t port)
      : PeerProcess(std::vector<std::string>{}, mode, "127.0.0.1", port) {}
  // `prefix` runs it (e.g. {"ip", "netns", "exec", NS, "env", "SOFTRDMA_ADDR=..."},
  // each of which execs the next, so the process killed is the peer itself).
  PeerProcess(std::vector<std::string> prefix, const char* mode, const std::string& address,
              uint16_t port) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    prefix.insert(prefix.end(), {SOFTRDMA_RDMACM_PEER, mode, address, std::to_string(port)});
    std::vector<char*> argv;
    for (std::string& arg : prefix) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    stdin_ = to_child[1];
    stdout_ = from_child[0];
  }
  ~PeerProcess() {
    if (stdin_ >= 0) close(stdin_);
    if (stdout_ >= 0) close(stdout_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Its next line (without the newline) within a hang guard (30 s unless said);
  // "" at its end.
  std::string line(int guard_ms = 30000) {
    std::string text;
    char c = 0;
    for (;;) {
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, guard_ms) != 1 || read(stdout_, &c, 1) != 1 || c == '\n') return text;
      text += c;
    }
  }
  // SIGKILL, and reaped: gone before the call returns, as a crashed process is.
  void kill_now() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void stop() {
    kill(pid_, SIGSTOP);
    int status = 0;
    waitpid(pid_, &status, WUNTRACED);  // stopped for sure
  }
  void resume() { kill(pid_, SIGCONT); }
  pid_t pid() const { return pid_; }
  // Waits for it to exit by itself (reaped); whether it exited with status 0.
  bool exited_cleanly() {
    int status = -1;
    const bool reaped = waitpid(pid_, &status, 0) == pid_;
    pid_ = -1;
    return reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
};

// A listener on 127.0.0.1:port and the connection it accepts, with an RC QP.
struct CmServer {
  uint16_t port = free_port();
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* listen_id = nullptr;
  rdma_cm_id* conn = nullptr;

  CmServer() {
    sockaddr_in address = ipv4("127.0.0.1", port);
    if (rdma_create_id(channel, &listen_id, nullptr, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(listen_id, as_sockaddr(address)) != 0 || rdma_listen(listen_id, 4) != 0)
      listen_id = nullptr;
  }
  // The accepted connection's QP and id go (the listener stays).
  void drop_connection() {
    if (conn == nullptr) return;
    rdma_destroy_qp(conn);
    rdma_destroy_id(conn);
    conn = nullptr;
  }
  ~CmServer() {
    drop_connection();
    if (listen_id != nullptr) rdma_destroy_id(listen_id);
    rdma_destroy_event_channel(channel);
  }
  // The next event's type (and it acknowledged), or -1 when none came in 30 s.
  int next() {
    rdma_cm_event* event = next_event(channel);
    if (event == nullptr) return -1;
    const int type = event->event;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) conn = event->id;
    rdma_ack_cm_event(event);
    return type;
  }
  bool accept() {
    if (next() != RDMA_CM_EVENT_CONNECT_REQUEST) return false;
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    if (rdma_create_qp(conn, nullptr, &attr) != 0) return false;
    rdma_conn_param param{};
    param.retry_count = 7;
    return rdma_accept(conn, &param) == 0 && next() == RDMA_CM_EVENT_ESTABLISHED;
  }
  // A zero-length SEND: work outstanding on the connection.
  bool post_send() {
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    return ibv_post_send(conn->qp, &wr, &bad) == 0;
  }
  // Nothing queued on the channel right now.
  bool quiet() {
    pollfd p{channel->fd, POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }
};

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace softrdma::rdmacm::testing
