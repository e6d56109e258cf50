// Reading whole files for the tokenizer, plain or gzip-compressed.
#pragma once
#include <string>

namespace dsinfer {

// Reads the file; throws dsinfer::Error naming the path when it cannot be read.
std::string read_file(const std::string& path);
// Reads and gunzips the file; throws dsinfer::Error naming the path on I/O or format errors.
std::string read_gzip_file(const std::string& path);

}  // namespace dsinfer
