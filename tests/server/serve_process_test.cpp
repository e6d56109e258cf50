// `dsinfer serve` as a subprocess under pressure: out of file descriptors (the listener backs off instead of
// spinning on accept, by the AcceptBackoff rules tested here too), and a SIGTERM while the model loads.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "http_test_client.h"
#include "server/accept_backoff.h"
#include "subprocess.h"

namespace dsinfer::testing {
namespace {

using namespace std::chrono_literals;

const std::string kModel = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";

// CPU seconds (user + system) the process has used, from /proc/PID/stat.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));  // fields after "(comm) "
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

TEST(AcceptBackoffTest, ExhaustionWaitsOtherErrorsRetryAtOnceAndLogsAreRateLimited) {
  using server::AcceptBackoff;
  AcceptBackoff backoff(100ms, 10s);
  const auto t0 = AcceptBackoff::Clock::now();
  const boost::system::error_code emfile(EMFILE, boost::system::system_category());
  AcceptBackoff::Retry r = backoff.on_error(emfile, t0);
  EXPECT_EQ(r.delay, 100ms);
  EXPECT_TRUE(r.log);
  EXPECT_EQ(r.failures, 1u);
  for (int e : {ENFILE, ENOBUFS, ENOMEM}) {
    r = backoff.on_error(boost::system::error_code(e, boost::system::system_category()), t0 + 1s);
    EXPECT_EQ(r.delay, 100ms) << e;
    EXPECT_FALSE(r.log) << e;
  }
  r = backoff.on_error(boost::system::error_code(ECONNABORTED, boost::system::system_category()), t0 + 2s);
  EXPECT_EQ(r.delay, 0ms);
  EXPECT_FALSE(r.log);
  r = backoff.on_error(emfile, t0 + 10s);
  EXPECT_TRUE(r.log);
  EXPECT_EQ(r.failures, 5u);  // the four unlogged ones and this one
}

// With 64 descriptors, 200 connections exhaust the server's table while more wait in the backlog. Accept
// fails with EMFILE for as long as they stay open: before the back-off that was a busy loop (a whole core,
// one log line per failure); now a retry every 100 ms. Once the clients go, the server serves again.
TEST(ServeProcessTest, OutOfDescriptorsBacksOffAndRecovers) {
  Subprocess server({"/bin/sh", "-c",
                     "ulimit -n 64 && exec '" + std::string(DSINFER_BINARY) + "' serve --model '" + kModel +
                         "' --port 0 --device cpu"});
  const int port = server.wait_for_port(60s);
  ASSERT_TRUE(server.wait_for_line("ready", 120s)) << server.log();

  std::vector<std::unique_ptr<RawConnection>> clients;
  for (int i = 0; i < 200; ++i) clients.push_back(std::make_unique<RawConnection>(port));
  ASSERT_TRUE(server.wait_for_line("accept failed", 10s)) << server.log();
  const double before = cpu_seconds(server.pid());
  std::this_thread::sleep_for(1s);
  const double used = cpu_seconds(server.pid()) - before;
  EXPECT_LT(used, 0.25) << "CPU seconds over one second of EMFILE";
  EXPECT_LE(count(server.log(), "accept failed"), 2u) << server.log();

  clients.clear();
  const auto end = std::chrono::steady_clock::now() + 10s;
  int status = 0;
  while (status != 200 && std::chrono::steady_clock::now() < end) {
    try {
      status = get(port, "/health/live").status;
    } catch (const std::runtime_error&) {
      std::this_thread::sleep_for(50ms);
    }
  }
  EXPECT_EQ(status, 200) << server.log();
  server.signal(SIGTERM);
  const auto exit_status = server.wait_exit(30s);
  ASSERT_TRUE(exit_status.has_value()) << server.log();
  EXPECT_EQ(*exit_status, 0) << server.log();
}

// A model whose weights never arrive (a FIFO nobody writes: the loader blocks in open(), like a load from a
// slow disk). SIGTERM used to stop the HTTP loop and then wait in join() for the loader, forever; further
// signals were swallowed. Now the process exits at once.
TEST(ServeProcessTest, SigtermWhileLoadingExitsPromptly) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("dsinfer_slow_model_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(fs::path(kModel) / f, dir / f);
  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);

  Subprocess server({DSINFER_BINARY, "serve", "--model", dir.string(), "--port", "0", "--device", "cpu"});
  const int port = server.wait_for_port(60s);
  HttpResult ready = get(port, "/health/ready");
  EXPECT_EQ(ready.status, 503) << ready.body;
  std::this_thread::sleep_for(200ms);  // the loader is in open()
  const auto start = std::chrono::steady_clock::now();
  server.signal(SIGTERM);
  const auto status = server.wait_exit(5s);
  ASSERT_TRUE(status.has_value()) << "still running 5 s after SIGTERM\n" << server.log();
  EXPECT_EQ(*status, 0) << server.log();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_NE(server.log().find("stopped while loading"), std::string::npos) << server.log();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsinfer::testing
