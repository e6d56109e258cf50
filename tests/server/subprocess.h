// Runs `dsinfer serve` (or any command) as a child process for the server tests: stderr is captured line by
// line so a test can wait for "listening on ...:PORT" and "ready"; signals and exit status are observable.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace dsinfer::testing {

class Subprocess {
 public:
  explicit Subprocess(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~Subprocess() {
    if (!exited_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  // Reads stderr until a line containing `needle` arrives; returns that line (nullopt on timeout or EOF).
  std::optional<std::string> wait_for_line(const std::string& needle, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      size_t eol;
      while ((eol = pending_.find('\n')) != std::string::npos) {
        std::string line = pending_.substr(0, eol);
        pending_.erase(0, eol + 1);
        log_ += line + "\n";
        if (line.find(needle) != std::string::npos) return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      pending_.append(buf, static_cast<size_t>(n));
    }
  }

  // The port of "listening on http://HOST:PORT".
  int wait_for_port(std::chrono::milliseconds timeout) {
    auto line = wait_for_line("listening on http://", timeout);
    if (!line) throw std::runtime_error("the server did not start:\n" + log_);
    const size_t colon = line->rfind(':');
    return std::stoi(line->substr(colon + 1));
  }

  void signal(int signo) { ::kill(pid_, signo); }
  pid_t pid() const { return pid_; }

  // Exit status (or 128 + signal), nullopt when still running after `timeout`.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      drain_output();
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        drain_output();
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

  // Everything read from stderr so far.
  const std::string& log() {
    drain_output();
    return log_;
  }

 private:
  void drain_output() {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      char buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n <= 0) break;
      log_.append(buf, static_cast<size_t>(n));
    }
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  std::string pending_;
  std::string log_;
};

// Runs a shell command; its stdout, and its exit status in *status (-1 when it did not exit).
inline std::string run_capture(const std::string& command, int* status) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("popen failed: " + command);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// s as one single-quoted shell word.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace dsinfer::testing
