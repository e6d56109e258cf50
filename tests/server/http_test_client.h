// A small blocking HTTP/1.1 client over POSIX sockets for the server tests (loopback only): whole requests,
// raw connections for slow/partial/disconnecting clients, chunked decoding and SSE "data:" parsing.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsinfer::testing {

struct HttpResult {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
};

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
      throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) +
                               " failed: " + std::strerror(errno));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawConnection() { close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Half-closes: the peer reads EOF after what was sent, and can still answer.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a TCP reset (SO_LINGER 0): an abrupt client disconnect.
  void reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close();
  }

  void send_all(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      sent += static_cast<size_t>(n);
    }
  }

  // Reads what arrives within `timeout`; "" on EOF. Throws on timeout.
  std::string recv_some(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (r == 0) throw std::runtime_error("recv timed out");
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return "";
    return std::string(buf, static_cast<size_t>(n));
  }

  // True when the peer closed the connection within `timeout` (EOF or reset).
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buf[4096];
        const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
        if (n <= 0) return true;
      }
    }
    return false;
  }

  // Reads one whole response (Content-Length, chunked, or until EOF).
  HttpResult read_response(std::chrono::milliseconds timeout = std::chrono::milliseconds(60000)) {
    while (buffer_.find("\r\n\r\n") == std::string::npos) fill(timeout);
    const size_t head_end = buffer_.find("\r\n\r\n");
    const std::string head = buffer_.substr(0, head_end);
    buffer_.erase(0, head_end + 4);
    HttpResult r;
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line =
          head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
    }
    if (r.headers.count("content-length")) {
      const size_t len = std::stoul(r.headers["content-length"]);
      while (buffer_.size() < len) fill(timeout);
      r.body = buffer_.substr(0, len);
      buffer_.erase(0, len);
    } else if (r.headers.count("transfer-encoding") && r.headers.at("transfer-encoding") == "chunked") {
      for (;;) {
        while (buffer_.find("\r\n") == std::string::npos) fill(timeout);
        const size_t eol = buffer_.find("\r\n");
        const size_t size = std::stoul(buffer_.substr(0, eol), nullptr, 16);
        while (buffer_.size() < eol + 2 + size + 2) fill(timeout);
        r.body += buffer_.substr(eol + 2, size);
        buffer_.erase(0, eol + 2 + size + 2);
        if (size == 0) break;
      }
    } else {
      try {
        for (;;) fill(timeout);
      } catch (const std::runtime_error&) {
      }
      r.body = buffer_;
      buffer_.clear();
    }
    return r;
  }

 private:
  void fill(std::chrono::milliseconds timeout) {
    const std::string more = recv_some(timeout);
    if (more.empty()) throw std::runtime_error("connection closed");
    buffer_ += more;
  }
  int fd_ = -1;
  std::string buffer_;
};

inline std::string http_request_text(const std::string& method, const std::string& path,
                                     const std::string& body, const std::vector<std::string>& headers = {}) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return req + "\r\n" + body;
}

// One request on a fresh connection.
inline HttpResult http_request(int port, const std::string& method, const std::string& path,
                               const std::string& body = "", const std::vector<std::string>& headers = {}) {
  RawConnection c(port);
  c.send_all(http_request_text(method, path, body, headers));
  return c.read_response();
}

inline HttpResult post(int port, const std::string& path, const std::string& body,
                       const std::vector<std::string>& headers = {}) {
  return http_request(port, "POST", path, body, headers);
}

inline HttpResult get(int port, const std::string& path, const std::vector<std::string>& headers = {}) {
  return http_request(port, "GET", path, "", headers);
}

// The payloads of the "data: ..." events of an SSE body.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

}  // namespace dsinfer::testing
