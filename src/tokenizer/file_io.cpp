// File reading with zlib for .gz files.
#include "tokenizer/file_io.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dsinfer {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("error reading '", path, "'");
  return ss.str();
}

std::string read_gzip_file(const std::string& compressed_path) {
  const std::string data = read_file(compressed_path);
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    fail("zlib: cannot initialise inflate for '", compressed_path, "'");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  out.resize(data.size() * 4 + 1024);
  int rc = Z_OK;
  while (true) {
    if (zs.total_out >= out.size()) out.resize(out.size() * 2);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + zs.total_out);
    zs.avail_out = static_cast<uInt>(out.size() - zs.total_out);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && rc != Z_BUF_ERROR) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // truncated input
  }
  const char* msg = zs.msg;
  const size_t total = zs.total_out;
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    fail("'", compressed_path, "' is not a valid gzip file (", msg ? msg : "truncated or corrupt data", ")");
  }
  out.resize(total);
  return out;
}

}  // namespace dsinfer
