// Every setting comes from one environment variable; a malformed value is refused
// with a message naming the variable (docs/configuration.md).
#include "runtime/settings.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace softrdma::runtime {
namespace {

// Clears every SOFTRDMA_* variable the test may set, before and after.
class SettingsTest : public ::testing::Test {
 protected:
  static constexpr const char* kNames[] = {"SOFTRDMA_DEVICE", "SOFTRDMA_ADDR",
                                           "SOFTRDMA_PCAP",   "SOFTRDMA_FAULTS",
                                           "SOFTRDMA_PROGRESS", "SOFTRDMA_WINDOW",
                                           "SOFTRDMA_SYSFS_VIEW", "SOFTRDMA_SHARE_ADDRESS",
                                           "SOFTRDMA_WIRE", "SOFTRDMA_SELECTIVE_REPEAT",
                                           "SOFTRDMA_CONGESTION", "SOFTRDMA_LINE_RATE_GBPS",
                                           "SOFTRDMA_TARGET_DELAY_US",
                                           "SOFTRDMA_INITIAL_WINDOW"};
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* name : kNames) unsetenv(name);
  }
};

// Nothing set: the documented defaults.
TEST_F(SettingsTest, DefaultsWhenNothingIsSet) {
  std::string error;
  auto s = Settings::from_environment(error);
  ASSERT_TRUE(s.has_value()) << error;
  EXPECT_EQ(s->device_name, "softrdma0");
  EXPECT_TRUE(s->address.empty());  // the host's, chosen when the device opens
  EXPECT_TRUE(s->share_address) << "an RNIC serves every process of its host";
  EXPECT_TRUE(s->joins_shared_address());
  EXPECT_FALSE(s->share_crossed);
  EXPECT_TRUE(s->pcap_path.empty());
  EXPECT_TRUE(s->faults.empty());
  EXPECT_TRUE(s->progress_thread);
  EXPECT_EQ(s->max_unacked_packets, 64u);
  EXPECT_EQ(s->selective_window, 256u);
  bool saw_window = false;
  for (const auto& [name, value] : s->describe()) {
    if (name == "SOFTRDMA_WINDOW") {
      EXPECT_EQ(value, "64 (go-back-N), 256 (selective repeat)");
      saw_window = true;
    }
  }
  EXPECT_TRUE(saw_window);
  EXPECT_TRUE(s->sysfs_view);
  EXPECT_EQ(s->selective_repeat, engine::SelectiveRepeatMode::kNegotiated);
}

// SOFTRDMA_SELECTIVE_REPEAT (docs/decisions/selective-repeat.md): its three values.
TEST_F(SettingsTest, SelectiveRepeatTakesItsThreeValues) {
  const std::pair<const char*, engine::SelectiveRepeatMode> values[] = {
      {"negotiated", engine::SelectiveRepeatMode::kNegotiated},
      {"always", engine::SelectiveRepeatMode::kAlways},
      {"off", engine::SelectiveRepeatMode::kOff}};
  for (const auto& [value, mode] : values) {
    setenv("SOFTRDMA_SELECTIVE_REPEAT", value, 1);
    std::string error;
    auto s = Settings::from_environment(error);
    ASSERT_TRUE(s.has_value()) << error;
    EXPECT_EQ(s->selective_repeat, mode) << value;
  }
}

// SOFTRDMA_CONGESTION, SOFTRDMA_TARGET_DELAY_US and SOFTRDMA_LINE_RATE_GBPS
// (docs/decisions/congestion-control.md): DCQCN and the delay control, 750 us
// above the base round trip, 40 Gbit/s, unless told otherwise.
TEST_F(SettingsTest, CongestionControlIsDcqcnAndDelayUnlessTurnedOff) {
  std::string error;
  auto s = Settings::from_environment(error);
  ASSERT_TRUE(s.has_value()) << error;
  EXPECT_TRUE(s->dcqcn);
  EXPECT_TRUE(s->delay_control);
  EXPECT_EQ(s->target_delay_us, 750u);
  EXPECT_EQ(s->line_rate_gbps, 40u);
  EXPECT_EQ(s->initial_window, 32u);
  setenv("SOFTRDMA_CONGESTION", "off", 1);
  setenv("SOFTRDMA_LINE_RATE_GBPS", "100", 1);
  setenv("SOFTRDMA_TARGET_DELAY_US", "50", 1);
  s = Settings::from_environment(error);
  ASSERT_TRUE(s.has_value()) << error;
  EXPECT_FALSE(s->dcqcn);
  EXPECT_FALSE(s->delay_control);
  EXPECT_EQ(s->line_rate_gbps, 100u);
  EXPECT_EQ(s->target_delay_us, 50u);
  const std::pair<const char*, std::pair<bool, bool>> modes[] = {
      {"dcqcn", {true, false}}, {"delay", {false, true}}, {"dcqcn+delay", {true, true}}};
  for (const auto& [mode, on] : modes) {
    setenv("SOFTRDMA_CONGESTION", mode, 1);
    s = Settings::from_environment(error);
    ASSERT_TRUE(s.has_value()) << error;
    EXPECT_EQ(s->dcqcn, on.first) << mode;
    EXPECT_EQ(s->delay_control, on.second) << mode;
  }
}

// Each variable lands in its field; describe() shows the values in force.
TEST_F(SettingsTest, EveryVariableIsRead) {
  setenv("SOFTRDMA_DEVICE", "rnic7", 1);
  setenv("SOFTRDMA_ADDR", "127.0.9.9", 1);
  setenv("SOFTRDMA_PCAP", "/tmp/x.pcap", 1);
  setenv("SOFTRDMA_FAULTS", "loss=0.1", 1);
  setenv("SOFTRDMA_PROGRESS", "inline", 1);
  setenv("SOFTRDMA_WINDOW", "100", 1);
  setenv("SOFTRDMA_SYSFS_VIEW", "off", 1);
  setenv("SOFTRDMA_INITIAL_WINDOW", "8", 1);
  std::string error;
  auto s = Settings::from_environment(error);
  ASSERT_TRUE(s.has_value()) << error;
  EXPECT_EQ(s->device_name, "rnic7");
  EXPECT_EQ(s->address, "127.0.9.9");
  EXPECT_EQ(s->pcap_path, "/tmp/x.pcap");
  EXPECT_EQ(s->faults, "loss=0.1");
  EXPECT_FALSE(s->progress_thread);
  EXPECT_EQ(s->max_unacked_packets, 100u);
  EXPECT_EQ(s->selective_window, 100u);  // set: every RC connection's window
  EXPECT_FALSE(s->sysfs_view);
  EXPECT_EQ(s->initial_window, 8u);
  bool saw_window = false;
  for (const auto& [name, value] : s->describe()) {
    if (name == "SOFTRDMA_WINDOW") saw_window = value == "100";
  }
  EXPECT_TRUE(saw_window);
}

// Malformed values are refused, and the message names the variable.
TEST_F(SettingsTest, MalformedValuesAreRefusedByName) {
  const std::pair<const char*, const char*> bad[] = {
      {"SOFTRDMA_PROGRESS", "sometimes"}, {"SOFTRDMA_WINDOW", "0"},
      {"SOFTRDMA_WINDOW", "4097"},        {"SOFTRDMA_WINDOW", "12x"},
      {"SOFTRDMA_SYSFS_VIEW", "yes"},     {"SOFTRDMA_SHARE_ADDRESS", "2"},
      {"SOFTRDMA_SELECTIVE_REPEAT", "on"}, {"SOFTRDMA_CONGESTION", "dctcp"},
      {"SOFTRDMA_LINE_RATE_GBPS", "0"},   {"SOFTRDMA_LINE_RATE_GBPS", "1000001"},
      {"SOFTRDMA_CONGESTION", "delay+dcqcn"}, {"SOFTRDMA_TARGET_DELAY_US", "0"},
      {"SOFTRDMA_TARGET_DELAY_US", "1000001"}, {"SOFTRDMA_INITIAL_WINDOW", "0"},
      {"SOFTRDMA_INITIAL_WINDOW", "4097"},
      {"SOFTRDMA_DEVICE", "a-name-that-is-far-too-long-for-a-verbs-device-name-of-64-bytes-xx"}};
  for (const auto& [name, value] : bad) {
    clear();
    setenv(name, value, 1);
    std::string error;
    EXPECT_FALSE(Settings::from_environment(error).has_value()) << name << "=" << value;
    EXPECT_NE(error.find(name), std::string::npos) << error;
  }
}

// Sharing is the default, with or without SOFTRDMA_ADDR; "crossed" shares too, and
// says so; "0" keeps the address this process's alone, and with no address that is
// a loopback address of its own. iWARP holds no UDP port: it joins no group.
TEST_F(SettingsTest, SharingIsTheDefaultAndZeroGivesAnAddressOfItsOwn) {
  std::string error;
  for (const char* address : {"", "127.0.9.9"}) {
    if (*address != '\0') setenv("SOFTRDMA_ADDR", address, 1);
    for (const char* value : {"1", "crossed"}) {
      setenv("SOFTRDMA_SHARE_ADDRESS", value, 1);
      auto s = Settings::from_environment(error);
      ASSERT_TRUE(s.has_value()) << error;
      EXPECT_TRUE(s->share_address) << value;
      EXPECT_EQ(s->share_crossed, std::string(value) == "crossed");
      EXPECT_TRUE(s->same_host) << "a shared address keeps the same-host path";
      for (const auto& [name, shown] : s->describe())
        if (name == "SOFTRDMA_SHARE_ADDRESS") {
          EXPECT_EQ(shown.rfind(value, 0), 0u) << shown;
        }
    }
  }
  unsetenv("SOFTRDMA_ADDR");
  setenv("SOFTRDMA_SHARE_ADDRESS", "0", 1);
  auto own = Settings::from_environment(error);
  ASSERT_TRUE(own.has_value()) << error;
  EXPECT_FALSE(own->share_address);
  EXPECT_NE(own->describe_address().find("of this process's own"), std::string::npos);
  unsetenv("SOFTRDMA_SHARE_ADDRESS");
  setenv("SOFTRDMA_WIRE", "iwarp", 1);
  auto iwarp = Settings::from_environment(error);
  ASSERT_TRUE(iwarp.has_value()) << error;
  EXPECT_FALSE(iwarp->joins_shared_address());
  EXPECT_NE(iwarp->describe_address().find("the host's address"), std::string::npos);
}

}  // namespace
}  // namespace softrdma::runtime
