// The bmc collector's daemon side: the helper's frames (an answer of
// OpenIPMI's simulator as nwd-bmc gave it, and answers that break the
// bounds), the SEL's state file, and the collector with a helper that is
// not there, that hangs, and that answers.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <toml++/toml.h>

#include <fstream>

#include "bmc/bmc_collector.hpp"
#include "bmc/bmc_metrics.hpp"
#include "bmc/bmc_wire.hpp"
#include "support/daemon_process.hpp"
#include "support/paths.hpp"

namespace nodewatch::bmc {
namespace {

using testing::ReadFile;
using testing::TempDir;
using namespace std::chrono_literals;

std::string Seed(const std::string& name) {
  return ReadFile(std::filesystem::path(NODEWATCH_TESTS_SOURCE_DIR) / "fuzz" / "seeds" /
                  "bmc_wire" / name);
}

TEST(BmcWire, TheSimulatorsAnswerDecodesWithItsNamesMadePrintable) {
  std::string why;
  auto r = decode_reading(Seed("answer-ipmi-sim"), &why);
  ASSERT_TRUE(r) << why;
  EXPECT_TRUE(r->error_reason.empty());
  EXPECT_EQ(r->firmware, "3.21");
  EXPECT_EQ(r->manufacturer, "MontaVista Software, Inc.");
  ASSERT_EQ(r->sensors.size(), 5u);
  EXPECT_EQ(r->sensors[0].name, "Inlet Temp");
  EXPECT_EQ(r->sensors[0].unit, 1);
  EXPECT_EQ(r->sensors[0].value, 47);
  EXPECT_EQ(r->sensors[0].state, "critical");
  // "FAN1" in 6-bit packed ASCII, as FreeIPMI 1.6.10 misreads it.
  EXPECT_EQ(r->sensors[1].name, "f?F");
  EXPECT_FALSE(r->sensors[2].value.has_value());
  ASSERT_EQ(r->events.size(), 2u);
  EXPECT_EQ(r->events[1].state, "critical");
  EXPECT_EQ(r->cursor, (SelCursor{2, 38290}));
  EXPECT_EQ(r->sdr_fetched, 6u);
  EXPECT_EQ(decode_reading(encode_reading(*r), &why), r);
}

TEST(BmcWire, AnswersThatBreakABoundAreRefused) {
  std::string why;
  const std::string ok = "ok\ncursor\t-1\t0\n";
  ASSERT_TRUE(decode_reading(ok, &why)) << why;
  for (const std::string& bad : std::vector<std::string>{
           std::string(""),
           std::string("ok\n"),                                           // no cursor
           "ok\nsensor\tA\tFan\t18\tRPM\tnan\tnominal\n" + ok.substr(3),  // not finite
           "ok\nsensor\tA\tFan\t18\tRPM\t1\tfine\n" + ok.substr(3),       // no such state
           "ok\nsensor\t\tFan\t18\tRPM\t1\tnominal\n" + ok.substr(3),     // no name
           "ok\nsensor\tA\tFan\t300\tRPM\t1\tnominal\n" + ok.substr(3),   // no such unit code
           std::string("ok\ncursor\t70000\t0\n"),                         // no such record id
           "ok\nevent\t1\t2\tFan\tnominal\tmore\n" + ok.substr(3),        // a field too many
           "ok\nsel\t1\t2\nsel\t1\t2\n" + ok.substr(3),                   // repeated
           "ok\nwhat\t1\n" + ok.substr(3),
           "ok\nsensor\t" + std::string(kMaxFieldBytes + 1, 'x') + "\tFan\t18\tRPM\t1\tnominal\n" +
               ok.substr(3),
           std::string("error\tbmc_timeout\n"),
       })
    EXPECT_FALSE(decode_reading(bad, &why)) << bad;
  std::string many = "ok\n";
  for (std::size_t i = 0; i <= kMaxSensors; ++i) many += "sensor\tS\tFan\t18\tRPM\t1\tnominal\n";
  EXPECT_FALSE(decode_reading(many + "cursor\t-1\t0\n", &why));
  EXPECT_EQ(why, "more sensors than its bound");
}

TEST(BmcWire, RequestsRoundTripAndOddOnesAreRefused) {
  Request q{9500ms, {2, 38290}, 256};
  EXPECT_EQ(decode_request(encode_request(q)), q);
  EXPECT_EQ(encode_request(q), "read 9500 2 38290 256");
  for (const char* bad : {"read 0 -1 0 1", "read 10 -2 0 1", "read 10 65536 0 1",
                          "read 10 -1 0 1025", "read 10 -1 0", "list 10", "read 10 -1 x 1"})
    EXPECT_FALSE(decode_request(bad)) << bad;
}

TEST(BmcSelBook, TheStateFileRoundTripsAndABadOneIsRefused) {
  SelBook b;
  b.target = "lan:127.0.0.1:623";
  b.cursor = {7, 1234};
  b.counts[{"Power Supply", "critical"}] = 3;
  b.counts[{"oem", "unknown"}] = 1;
  SelBook again;
  std::string why;
  ASSERT_TRUE(parse_sel_book(serialize_sel_book(b), &again, &why)) << why;
  EXPECT_EQ(again.counts, b.counts);
  EXPECT_EQ(again.cursor, b.cursor);
  EXPECT_EQ(again.target, b.target);
  EXPECT_FALSE(parse_sel_book("nodewatch-kernel-state 1\n", &again, &why));
  EXPECT_FALSE(parse_sel_book("nodewatch-bmc-sel 1\ncount\tFan\tbad\t1\n", &again, &why));
  EXPECT_FALSE(parse_sel_book("nodewatch-bmc-sel 1\ncount\tFan\tnominal\t-1\n", &again, &why));
  // What the daemon writes cuts a field at kMaxFieldBytes: a longer one is
  // not its (the fuzzer's regressions/bmc_wire).
  EXPECT_FALSE(parse_sel_book(
      "nodewatch-bmc-sel 1\ncount\t" + std::string(kMaxFieldBytes + 1, 'T') + "\tnominal\t1\n",
      &again, &why));
  EXPECT_EQ(why, "a field over 128 bytes, or with a carriage return");
}

// The password file is refused while other users can read it, and so are
// a protocol and a privilege FreeIPMI is not asked for.
TEST(BmcOptions, APasswordFileOthersCanReadIsRefused) {
  TempDir dir;
  auto password = dir.write("password", "secret\n");
  auto read = [&](const std::string& text) {
    toml::table table = toml::parse(text);
    std::vector<ConfigError> errors;
    OptionReader r(table, "collectors.bmc", "test.toml", &errors);
    bmc_collector_spec().read_options(r);
    std::string out;
    for (const ConfigError& e : errors) out += e.str() + "\n";
    return out;
  };
  const std::string keys = "host = \"127.0.0.1:623\"\nstate_directory = \"" + dir.path().string() +
                           "\"\npassword_file = \"" + password.string() + "\"\n";
  ::chmod(password.c_str(), 0644);
  EXPECT_NE(read(keys).find("can be read by other users"), std::string::npos) << read(keys);
  ::chmod(password.c_str(), 0640);
  EXPECT_EQ(read(keys), "");
  EXPECT_NE(read(keys + "protocol = \"ipmi\"\n").find("\"lan\" or \"lanplus\""), std::string::npos);
  EXPECT_NE(read(keys + "privilege = \"root\"\n").find("\"user\", \"operator\""),
            std::string::npos);
}

// A fake nwd-bmc: a shell script that answers each request (read with
// head -c) with `answer`, or hangs.
std::string FakeHelper(const TempDir& dir, const std::string& answer_file, bool hang) {
  std::string script = "#!/bin/sh\n";
  if (hang) {
    script += "exec sleep 60\n";
  } else {
    script +=
        "while head -c 4 >/dev/null; do\n"
        "  len=$(wc -c < '" +
        answer_file +
        "')\n"
        "  printf \"$(printf '\\\\%03o\\\\%03o\\\\%03o\\\\%03o' $((len & 255)) $((len >> 8 & 255)) "
        "$((len >> 16 & 255)) 0)\"\n"
        "  cat '" +
        answer_file +
        "'\n"
        "  exec sleep 60\n"  // one answer (the request is not read), then killed
        "done\n";
  }
  auto path = dir.write("nwd-bmc", script);
  ::chmod(path.c_str(), 0755);
  return path.string();
}

CollectContext Within(std::chrono::milliseconds d) {
  CollectContext ctx;
  ctx.deadline = monotonic_clock().now() + d;
  return ctx;
}

BmcOptions Options(const TempDir& dir, const std::string& helper) {
  BmcOptions o;
  o.host = "127.0.0.1:9";
  o.protocol = "lan";
  o.state_directory = (dir.path() / "state").string();
  o.helper = helper;
  return o;
}

TEST(BmcCollector, NoDeviceAndNoHostExportsNothing) {
  TempDir dir;
  BmcOptions o = Options(dir, "/nonexistent");
  o.host = "";
  o.device = (dir.path() / "ipmi0").string();
  BmcCollector c(o, std::make_shared<SelBook>());
  MetricSink sink(bmc_metric_table());
  c.collect(Within(1s), sink);
  EXPECT_EQ(sink.render(), "");
}

TEST(BmcCollector, AnAnswerBecomesSeriesAndItsSelEntriesAreKept) {
  TempDir dir;
  auto answer = dir.write("answer", Seed("answer-ipmi-sim"));
  BmcCollector c(Options(dir, FakeHelper(dir, answer.string(), false)),
                 std::make_shared<SelBook>());
  MetricSink sink(bmc_metric_table());
  c.collect(Within(2s), sink);
  double v = 0;
  ASSERT_TRUE(sink.get(families::kUp, {}, &v)) << sink.render();
  EXPECT_EQ(v, 1);
  ASSERT_TRUE(sink.get(families::kTemperatureCelsius, {"Inlet Temp"}, &v));
  EXPECT_EQ(v, 47);
  ASSERT_TRUE(sink.get(families::kSensorState, {"Inlet Temp", "Temperature"}, &v));
  EXPECT_EQ(v, 2);
  ASSERT_TRUE(sink.get(families::kPowerWatts, {"PSU1 Input"}, &v));
  EXPECT_EQ(v, 350);
  ASSERT_TRUE(sink.get(families::kSelEventsTotal, {"Temperature", "critical"}, &v));
  EXPECT_EQ(v, 1);
  ASSERT_TRUE(sink.get(families::kSensors, {"critical"}, &v));
  EXPECT_EQ(v, 1);
  EXPECT_TRUE(sink.violations().empty());
  const std::string state = ReadFile(dir.path() / "state" / "bmc-sel.state");
  EXPECT_NE(state.find("cursor\t2\t38290\n"), std::string::npos) << state;
  EXPECT_NE(state.find("count\tTemperature\tcritical\t1\n"), std::string::npos) << state;
}

// A helper that never answers is killed at the collection's deadline; the
// SEL's counts of an earlier run are exported all the same.
TEST(BmcCollector, AHungHelperIsKilledAtTheDeadlineAndTheCountsStay) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "state");
  std::ofstream(dir.path() / "state" / "bmc-sel.state")
      << "nodewatch-bmc-sel 1\ntarget\tlan:127.0.0.1:9\ncursor\t4\t100\ncount\tFan\tcritical\t5\n";
  BmcCollector c(Options(dir, FakeHelper(dir, "", true)), std::make_shared<SelBook>());
  MetricSink sink(bmc_metric_table());
  const auto start = std::chrono::steady_clock::now();
  c.collect(Within(1s), sink);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1100ms);
  double v = -1;
  ASSERT_TRUE(sink.get(families::kUp, {}, &v));
  EXPECT_EQ(v, 0);
  ASSERT_TRUE(sink.get(families::kSelEventsTotal, {"Fan", "critical"}, &v));
  EXPECT_EQ(v, 5);
  EXPECT_NE(sink.render().find("nodewatch_bmc_up 0"), std::string::npos);
}

}  // namespace
}  // namespace nodewatch::bmc
