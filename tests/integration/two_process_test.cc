// Two processes over UDP loopback (DESIGN.md §8): softrdma-demo in its test mode
// starts a server and a client process through `softrdma run`, so each is an
// ordinary verbs program on softrdma's drop-in libibverbs with its own software
// RNIC on its own 127.x.y.z address, and with the library's fault injection
// (SOFTRDMA_FAULTS: loss, duplication, reordering on its transmit side) in its
// environment. They connect N QPs of one transport (RC, UC, UD, or RC QPs on a
// shared receive queue) and move randomly sized messages (every operation the
// transport has, both directions, several QPs, several work requests outstanding,
// scatter/gather lists), checking every byte (regenerated contents, CRC-32
// exchanged for one-sided operations) and every completion. On UC and UD a lost
// message is gone: the receiver checks that every message that arrives is intact
// and counts those that never arrived. This test asserts their verdict and what
// the run must have exercised. No timing is asserted.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct ProgramRun {
  int exit_code = -1;
  std::vector<std::string> lines;  // stdout
};

// Runs `argv`, collecting its stdout (its stderr is the test's, for the log).
ProgramRun run_program(const std::vector<std::string>& argv) {
  ProgramRun r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  close(fds[0]);
  if (rc != 0) return r;
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) r.lines.push_back(line);
  return r;
}

// The fields of the first line starting with `kind ` (key=value pairs).
std::map<std::string, std::string> fields_of(const ProgramRun& r, const std::string& kind,
                                             const std::string& must_contain = "") {
  std::map<std::string, std::string> f;
  for (const std::string& line : r.lines) {
    if (line.rfind(kind + " ", 0) != 0 || line.find(must_contain) == std::string::npos) continue;
    std::istringstream in(line);
    std::string tok;
    while (in >> tok)
      if (auto eq = tok.find('='); eq != std::string::npos)
        f[tok.substr(0, eq)] = tok.substr(eq + 1);
    break;
  }
  return f;
}

uint64_t num(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

// Message counts scale down in sanitizer builds (SOFTRDMA_INTEGRATION_SCALE, also
// from the environment); the 8 MiB messages of every op stay.
std::string scale_arg() {
  const char* env = std::getenv("SOFTRDMA_INTEGRATION_SCALE");
  return std::string("--scale=") + (env != nullptr ? env : SOFTRDMA_INTEGRATION_SCALE);
}

void dump(const ProgramRun& r) {
  for (const std::string& line : r.lines) std::printf("%s\n", line.c_str());
}

constexpr uint64_t kMaxMessage = 8u << 20;
const char* const kOps[] = {"SEND", "SEND_IMM", "WRITE",    "WRITE_IMM",
                            "READ", "CMP_SWAP", "FETCH_ADD"};

// What each transport offers (IBA Table 39).
std::vector<std::string> ops_of(const std::string& transport) {
  if (transport == "uc") return {"SEND", "SEND_IMM", "WRITE", "WRITE_IMM"};
  if (transport == "ud") return {"SEND", "SEND_IMM"};
  return {std::begin(kOps), std::end(kOps)};
}

struct LossCase {
  const char* transport;
  const char* name;
  const char* loss;
  uint64_t seed;
  const char* mtu;  // path MTUs vary across the cases: segmentation at several sizes
};

void PrintTo(const LossCase& c, std::ostream* os) { *os << c.transport << "_" << c.name; }

class TwoProcessLoss : public ::testing::TestWithParam<LossCase> {};

// Every operation of the transport, 1 B to 8 MiB (UD: to the MTU), 4 QPs both
// ways, loss + 1 % duplication + 2 % reordering on both processes' transmit
// sides: every byte and completion checks, and every message is accounted for.
TEST_P(TwoProcessLoss, EveryByteAndCompletionChecks) {
  const LossCase& c = GetParam();
  const std::string transport = c.transport;
  const ProgramRun r = run_program(
      {SOFTRDMA_DEMO, "--mode=test", "--transport=" + transport, "--qps=4",
       "--seed=" + std::to_string(c.seed), std::string("--loss=") + c.loss,
       std::string("--mtu=") + c.mtu, "--dup=0.01", "--reorder=0.02", scale_arg(),
       "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  if (r.exit_code != 0 || s.empty() || s.at("status") != "PASS") dump(r);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_FALSE(s.empty()) << "no summary line";
  EXPECT_EQ(s.at("status"), "PASS");
  EXPECT_EQ(s.at("transport"), transport);
  EXPECT_EQ(num(s, "errors"), 0u);
  EXPECT_GT(num(s, "completions"), 0u);
  for (const std::string& op : ops_of(transport))
    EXPECT_GT(num(s, "msgs_" + op), 0u) << op;
  // Every data message is accounted for: it arrived intact, or never.
  const double loss = std::strtod(c.loss, nullptr);
  const uint64_t sent = num(s, "sent"), received = num(s, "received"), lost = num(s, "lost");
  EXPECT_GT(sent, 0u);
  EXPECT_EQ(received + lost, sent);
  if (transport == "rc" || transport == "srq") {
    EXPECT_EQ(lost, 0u);
    EXPECT_GT(num(s, "crc_matches"), 0u);
    EXPECT_GT(num(s, "atomics"), 0u);
    // Every byte that moved was compared with regenerated contents somewhere.
    const uint64_t atomic_bytes = 8 * (num(s, "msgs_CMP_SWAP") + num(s, "msgs_FETCH_ADD"));
    EXPECT_GE(num(s, "bytes_compared"), num(s, "bytes") - atomic_bytes);
    if (loss <= 0.01) {
      for (const char* op : {"SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ"})
        EXPECT_EQ(num(s, std::string("max_") + op), kMaxMessage) << op;
    }
    // The faults happened and were recovered from (engine counters, `softrdma status`).
    if (loss > 0) {
      EXPECT_GT(num(s, "retransmitted"), 0u);
    }
    EXPECT_GT(num(s, "duplicate_requests"), 0u);
    EXPECT_GT(num(s, "seq_naks"), 0u);
  } else if (transport == "uc") {
    EXPECT_GT(num(s, "crc_matches"), 0u);
    // Without loss only reordering and duplication drop messages: each dropped
    // message the receiver counts lost is one its engine gave up (uc.md).
    if (loss > 0) {
      EXPECT_GT(lost, 0u);
    } else {
      EXPECT_LE(lost, num(s, "uc_messages_dropped"));
    }
  } else {  // ud
    const uint64_t mtu = std::strtoull(c.mtu, nullptr, 10);
    EXPECT_EQ(num(s, "max_SEND"), mtu);
    EXPECT_EQ(num(s, "max_SEND_IMM"), mtu);
    EXPECT_EQ(num(s, "ud_no_receive_wqe"), 0u);
    if (loss > 0) {
      EXPECT_GT(lost, 0u);
    } else {
      EXPECT_EQ(lost, 0u);  // reordered datagrams arrive late, duplicates twice
    }
  }
  EXPECT_EQ(num(s, "rx_malformed"), 0u);
}

#define SOFTRDMA_LOSS_CASES(t, seed)                                  \
  LossCase{t, "Loss0", "0", seed + 1, "4096"},                        \
      LossCase{t, "Loss1", "0.01", seed + 2, "1024"},                 \
      LossCase{t, "Loss5", "0.05", seed + 3, "2048"},                 \
      LossCase{t, "Loss10", "0.10", seed + 4, "4096"}

INSTANTIATE_TEST_SUITE_P(Faults, TwoProcessLoss,
                         ::testing::Values(SOFTRDMA_LOSS_CASES("rc", 10),
                                           SOFTRDMA_LOSS_CASES("uc", 20),
                                           SOFTRDMA_LOSS_CASES("ud", 30),
                                           SOFTRDMA_LOSS_CASES("srq", 40)),
                         [](const auto& info) {
                           return std::string(info.param.transport) + "_" + info.param.name;
                         });

// The demo's own phases (every op alone at 64 B, 64 KiB and 8 MiB, then a mix) at
// a small scale: the table has a row for every op and the run passes.
TEST(TwoProcessDemo, EveryOperationHasARow) {
  const ProgramRun r = run_program({SOFTRDMA_DEMO, "--scale=0.02", "--qps=2", "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  if (r.exit_code != 0) dump(r);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(s.at("status"), "PASS");
  for (const char* op : kOps) {
    bool row = false;
    for (const std::string& line : r.lines)
      row |= line.find(std::string(op) + "/") == 0;  // e.g. "READ/64KiB   READ ..."
    EXPECT_TRUE(row) << "no table row for " << op;
  }
}

// The checks can fail: with --inject-data-errors each process spoils one received
// SEND, one READ result and one WRITE target range before checking them, and the
// run must report those errors and fail.
TEST(TwoProcessDemo, CorruptedDataIsDetected) {
  const ProgramRun r = run_program({SOFTRDMA_DEMO, "--mode=test", "--qps=2", "--max-size=65536",
                                    "--scale=0.2", "--inject-data-errors", "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  ASSERT_FALSE(s.empty()) << "no summary line";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(s.at("status"), "FAIL");
  // Per process: SEND bytes, READ bytes + READ CRC, WRITE bytes + WRITE CRC.
  EXPECT_GE(num(s, "errors"), 2u * 5u);
}

class TwoProcessCorruption : public ::testing::TestWithParam<const char*> {};

// The same on the other transports: each process spoils the first SEND it
// receives (and on UC its first WRITE range): the run must fail. On UC and UD a
// spoiled message is no message of the peer's plan: it is an error, not a loss.
TEST_P(TwoProcessCorruption, SpoiledSendIsDetected) {
  const ProgramRun r = run_program({SOFTRDMA_DEMO, "--mode=test", "--qps=2",
                                    std::string("--transport=") + GetParam(),
                                    "--max-size=65536", "--scale=0.2", "--inject-data-errors",
                                    "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  ASSERT_FALSE(s.empty()) << "no summary line";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(s.at("status"), "FAIL");
  EXPECT_GE(num(s, "errors"), 2u);
}

INSTANTIATE_TEST_SUITE_P(Transports, TwoProcessCorruption, ::testing::Values("uc", "ud", "srq"));

// A capture of a run with loss, duplication and reordering (the client's packets,
// both directions, as they were on the wire: SOFTRDMA_PCAP of the client process)
// decodes in tshark without a malformed packet, and every packet's ICRC checks
// (scripts/check_capture.sh recomputes it independently of softrdma's code). The
// capture holds at least every packet the client's engine received (its
// rx_packets counter, from `softrdma status`).
TEST(TwoProcessCapture, TsharkDecodesEveryPacketAndEveryIcrcChecks) {
  const std::string pcap = (std::filesystem::temp_directory_path() /
                            ("softrdma_integration_" + std::to_string(getpid()) + ".pcap"))
                               .string();
  const ProgramRun r = run_program({SOFTRDMA_DEMO, "--mode=test", "--qps=2", "--max-size=262144",
                                    "--scale=0.1", "--loss=0.01", "--dup=0.01", "--reorder=0.02",
                                    "--pcap=" + pcap, "--verbose", "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  if (r.exit_code != 0) dump(r);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(s.at("status"), "PASS");
  const auto client = fields_of(r, "  totals", "role=client");
  const uint64_t received = num(client, "rx_packets");
  const uint64_t sent = num(client, "tx_packets");
  ASSERT_GT(received, 100u);

  const ProgramRun check =
      run_program({"/bin/sh", SOFTRDMA_CHECK_CAPTURE, pcap, std::to_string(received)});
  dump(check);
  // tshark and python3 are installed by scripts/install-deps.sh: missing is a failure.
  ASSERT_NE(check.exit_code, 2) << "tshark or python3 missing (scripts/install-deps.sh)";
  EXPECT_EQ(check.exit_code, 0);
  // Every packet the client's engine received is in the file, and no more than it
  // sent (the fault injector sits above the capture: it drops some of those before
  // the wire, and duplicates at most 1 %) and received, with a few that follow the
  // counters' reading (a last ACK or duplicate).
  uint64_t in_file = 0;
  for (const std::string& line : check.lines) {
    const size_t at = line.find(" RoCEv2 packets, 0 not dissected");
    const size_t colon = line.rfind(": ", at);
    if (at != std::string::npos && colon != std::string::npos)
      in_file = std::stoull(line.substr(colon + 2, at - colon - 2));
  }
  EXPECT_GE(in_file, received);
  EXPECT_LE(in_file, sent + sent / 50 + received + 16);
  if (!HasFailure()) std::filesystem::remove(pcap);
}

}  // namespace
