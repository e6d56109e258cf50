// Tests for the safetensors reader: files written by the test (u64 LE header length + JSON header + data) are
// read back for every dtype, with metadata and sharded directories; corrupt files and indexes must raise
// dsinfer::Error naming the file (and tensor), and a fuzz loop checks that damaged files never crash.
#include "model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace dsinfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

std::string with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A valid file holding `entries` back to back, in order.
std::string build(const std::vector<Entry>& entries, const json& metadata = nullptr) {
  json header = json::object();
  std::string data;
  for (const Entry& e : entries) {
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data += e.bytes;
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  return with_header(header.dump(), data);
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("dsinfer_st_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& contents) {
    std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    return path;
  }

  // Opens `path`, expecting a dsinfer::Error whose message has every one of `parts`.
  void expect_error(const std::string& path, std::initializer_list<std::string> parts) {
    try {
      SafetensorsFile f(path);
      ADD_FAILURE() << "expected dsinfer::Error opening " << path;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(path));
      for (const std::string& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected dsinfer::Error, got " << e.what();
    }
  }

  void expect_dir_error(std::initializer_list<std::string> parts) {
    try {
      SafetensorsArchive::open_dir(dir_.string());
      ADD_FAILURE() << "expected dsinfer::Error opening " << dir_;
    } catch (const Error& e) {
      for (const std::string& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected dsinfer::Error, got " << e.what();
    }
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsEveryDtype) {
  std::vector<Entry> entries = {
      {"f32", "F32", {2, 3}, bytes_of<float>({1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f})},
      {"f64", "F64", {2}, bytes_of<double>({0.5, -1e10})},
      {"bf16", "BF16", {3}, bytes_of<uint16_t>({0x3f80, 0xc040, 0x0000})},   // 1, -3, 0
      {"f16", "F16", {2, 1}, bytes_of<uint16_t>({0x3c00, 0xc500})},          // 1, -5
      {"fp8", "F8_E4M3", {4}, bytes_of<uint8_t>({0x38, 0x7e, 0xb8, 0x01})},  // 1, 448, -1, 2^-9
      {"e8m0", "F8_E8M0", {2}, bytes_of<uint8_t>({127, 130})},               // 1, 8
      {"i8", "I8", {3}, bytes_of<int8_t>({-128, 0, 127})},
      {"u8", "U8", {2}, bytes_of<uint8_t>({0, 255})},
      {"i16", "I16", {2}, bytes_of<int16_t>({-300, 300})},
      {"i32", "I32", {1, 2}, bytes_of<int32_t>({-70000, 123456})},
      {"i64", "I64", {2}, bytes_of<int64_t>({-5, int64_t{1} << 40})},
      {"bool", "BOOL", {3}, bytes_of<uint8_t>({1, 0, 1})},
      {"scalar", "F32", {}, bytes_of<float>({42.0f})},
      {"empty", "F32", {0, 4}, ""},
  };
  const std::vector<std::vector<double>> expected = {{1.5, -2.0, 0.0, 3.25, 1e-3f, -7.0},
                                                     {0.5, -1e10},
                                                     {1, -3, 0},
                                                     {1, -5},
                                                     {1, 448, -1, 1.0 / 512},
                                                     {1, 8},
                                                     {-128, 0, 127},
                                                     {0, 255},
                                                     {-300, 300},
                                                     {-70000, 123456},
                                                     {-5, static_cast<double>(int64_t{1} << 40)},
                                                     {1, 0, 1},
                                                     {42},
                                                     {}};
  std::string path = write("all.safetensors", build(entries, {{"format", "pt"}, {"step", 5}}));
  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.tensors().size(), entries.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("step"), "5");
  EXPECT_FALSE(f.contains("__metadata__"));
  size_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(f.contains(e.name));
    const TensorInfo& info = f.info(e.name);
    EXPECT_EQ(info.name, e.name);
    EXPECT_EQ(dtype_name(info.dtype), e.dtype);
    EXPECT_EQ(info.shape, e.shape);
    EXPECT_EQ(info.offset, offset);
    EXPECT_EQ(info.nbytes, e.bytes.size());
    offset += e.bytes.size();
    Tensor t = f.get(e.name);
    EXPECT_EQ(t.shape(), e.shape);
    EXPECT_EQ(t.nbytes(), e.bytes.size());
    if (!e.bytes.empty()) {
      EXPECT_EQ(std::memcmp(t.raw(), e.bytes.data(), e.bytes.size()), 0);
    }
    Tensor v = t.to_f32();
    ASSERT_EQ(static_cast<size_t>(v.numel()), expected[i].size());
    for (size_t j = 0; j < expected[i].size(); ++j) EXPECT_EQ(v.f32()[j], static_cast<float>(expected[i][j]));
  }
  EXPECT_THROW(f.info("missing"), Error);
  EXPECT_THROW(f.get("missing"), Error);
}

TEST_F(SafetensorsTest, TensorOutlivesTheFileObject) {
  std::string path = write("a.safetensors", build({{"w", "F32", {2}, bytes_of<float>({3.0f, 4.0f})}}));
  Tensor t;
  {
    SafetensorsFile f(path);
    t = f.get("w");
  }
  EXPECT_EQ(t.f32()[0], 3.0f);
  EXPECT_EQ(t.f32()[1], 4.0f);
}

TEST_F(SafetensorsTest, PaddedHeaderAndUnorderedOffsets) {
  // Header padded with spaces (as the reference writer aligns it) and tensors stored out of name order.
  json header = {{"b", {{"dtype", "F32"}, {"shape", json::array({1})}, {"data_offsets", {0, 4}}}},
                 {"a", {{"dtype", "F32"}, {"shape", json::array({2})}, {"data_offsets", {4, 12}}}}};
  std::string h = header.dump() + std::string(5, ' ');
  std::string path = write("p.safetensors", with_header(h, bytes_of<float>({1, 2, 3})));
  SafetensorsFile f(path);
  EXPECT_EQ(f.get("b").f32()[0], 1.0f);
  EXPECT_EQ(f.get("a").f32()[1], 3.0f);
}

// ---------------------------------------------------------------------------------------------------------
// Corrupt files.

std::string one_tensor_header(const json& entry) {
  return json{{"t", entry}}.dump();
}

TEST_F(SafetensorsTest, EmptyAndShortFiles) {
  expect_error(write("empty.safetensors", ""), {"empty"});
  expect_error(write("short.safetensors", std::string("\x05\x00\x00", 3)), {"truncated"});
  expect_error(write("seven.safetensors", std::string(7, '\0')), {"truncated"});
  expect_error((dir_ / "does_not_exist.safetensors").string(), {});
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  std::string good = build({{"t", "F32", {1}, bytes_of<float>({1.0f})}});
  std::string bad = good;
  bad[0] = static_cast<char>(0xff);  // header length 255+ > file
  bad[1] = static_cast<char>(0x01);
  expect_error(write("len.safetensors", bad), {"truncated"});
  std::string huge = good;
  for (int i = 0; i < 8; ++i) huge[i] = static_cast<char>(0xff);
  expect_error(write("huge.safetensors", huge), {"header"});
  // Only the length, no header at all.
  expect_error(write("nohdr.safetensors", with_header("", "").substr(0, 8) + ""), {});
}

TEST_F(SafetensorsTest, InvalidHeaderJson) {
  expect_error(write("j1.safetensors", with_header("{\"t\": {", "")), {"invalid JSON"});
  expect_error(write("j2.safetensors", with_header("not json", "")), {"invalid JSON"});
  expect_error(write("j3.safetensors", with_header(std::string("{\"a\xff\": 1}"), "")), {"invalid JSON"});
  expect_error(write("arr.safetensors", with_header("[1, 2]", "")), {"not a JSON object"});
  expect_error(write("str.safetensors", with_header("\"x\"", "")), {"not a JSON object"});
}

TEST_F(SafetensorsTest, BadTensorEntries) {
  const std::string data = bytes_of<float>({1, 2, 3, 4});
  struct Case {
    const char* file;
    json entry;
    const char* message;
  };
  const Case cases[] = {
      {"notobj", json::array({1}), "not an object"},
      {"nodtype", {{"shape", json::array({4})}, {"data_offsets", {0, 16}}}, "dtype"},
      {"dtype_num", {{"dtype", 4}, {"shape", json::array({4})}, {"data_offsets", {0, 16}}}, "dtype"},
      {"unknown_dtype",
       {{"dtype", "F8_E5M2"}, {"shape", json::array({16})}, {"data_offsets", {0, 16}}},
       "F8_E5M2"},
      {"noshape", {{"dtype", "F32"}, {"data_offsets", {0, 16}}}, "shape"},
      {"neg_shape", {{"dtype", "F32"}, {"shape", json::array({-4})}, {"data_offsets", {0, 16}}}, "shape"},
      {"float_shape", {{"dtype", "F32"}, {"shape", json::array({2.5})}, {"data_offsets", {0, 16}}}, "shape"},
      {"str_shape", {{"dtype", "F32"}, {"shape", json::array({"4"})}, {"data_offsets", {0, 16}}}, "shape"},
      {"huge_shape",
       {{"dtype", "F32"}, {"shape", {uint64_t{1} << 40, uint64_t{1} << 40}}, {"data_offsets", {0, 16}}},
       "shape"},
      {"nooffsets", {{"dtype", "F32"}, {"shape", json::array({4})}}, "data_offsets"},
      {"neg_offsets",
       {{"dtype", "F32"}, {"shape", json::array({4})}, {"data_offsets", {-16, 0}}},
       "data_offsets"},
      {"one_offset",
       {{"dtype", "F32"}, {"shape", json::array({4})}, {"data_offsets", json::array({0})}},
       "data_offsets"},
      {"float_offsets",
       {{"dtype", "F32"}, {"shape", json::array({4})}, {"data_offsets", {0.0, 16.0}}},
       "data_offsets"},
      {"begin_after_end",
       {{"dtype", "F32"}, {"shape", json::array({0})}, {"data_offsets", {16, 0}}},
       "begin after end"},
      {"past_eof", {{"dtype", "F32"}, {"shape", json::array({8})}, {"data_offsets", {0, 32}}}, "truncated"},
      {"past_eof2", {{"dtype", "F32"}, {"shape", json::array({1})}, {"data_offsets", {16, 20}}}, "truncated"},
      {"size_mismatch",
       {{"dtype", "F32"}, {"shape", json::array({3})}, {"data_offsets", {0, 16}}},
       "needs 12"},
      {"size_mismatch2", {{"dtype", "BF16"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}, "needs 8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    std::string path =
        write(std::string(c.file) + ".safetensors", with_header(one_tensor_header(c.entry), data));
    expect_error(path, {"\"t\"", c.message});
  }
}

TEST_F(SafetensorsTest, TruncatedDataNamesFileAndTensor) {
  std::string good = build({{"first", "F32", {4}, bytes_of<float>({1, 2, 3, 4})},
                            {"second", "F32", {4}, bytes_of<float>({5, 6, 7, 8})}});
  expect_error(write("trunc.safetensors", good.substr(0, good.size() - 1)), {"\"second\"", "truncated"});
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  json header = {{"a", {{"dtype", "F32"}, {"shape", json::array({4})}, {"data_offsets", {0, 16}}}},
                 {"b", {{"dtype", "F32"}, {"shape", json::array({2})}, {"data_offsets", {8, 16}}}}};
  expect_error(write("o1.safetensors", with_header(header.dump(), std::string(16, '\0'))),
               {"\"a\"", "\"b\"", "overlap"});
  // Same start.
  header = {{"a", {{"dtype", "F32"}, {"shape", json::array({4})}, {"data_offsets", {0, 16}}}},
            {"b", {{"dtype", "F32"}, {"shape", json::array({1})}, {"data_offsets", {0, 4}}}}};
  expect_error(write("o2.safetensors", with_header(header.dump(), std::string(16, '\0'))), {"overlap"});
  // A large tensor overlapping one that is not its neighbour in offset order: an empty tensor sits between.
  header = {{"big", {{"dtype", "F32"}, {"shape", json::array({8})}, {"data_offsets", {0, 32}}}},
            {"empty", {{"dtype", "F32"}, {"shape", json::array({0})}, {"data_offsets", {4, 4}}}},
            {"small", {{"dtype", "F32"}, {"shape", json::array({1})}, {"data_offsets", {8, 12}}}}};
  expect_error(write("o3.safetensors", with_header(header.dump(), std::string(32, '\0'))),
               {"overlap", "\"small\""});
  // Three tensors where the overlap is with the one two places back.
  header = {{"a", {{"dtype", "F32"}, {"shape", json::array({8})}, {"data_offsets", {0, 32}}}},
            {"b", {{"dtype", "F32"}, {"shape", json::array({1})}, {"data_offsets", {4, 8}}}},
            {"c", {{"dtype", "F32"}, {"shape", json::array({1})}, {"data_offsets", {12, 16}}}}};
  expect_error(write("o4.safetensors", with_header(header.dump(), std::string(32, '\0'))), {"overlap"});
  // Adjacent tensors and empty tensors anywhere are fine.
  header = {{"a", {{"dtype", "F32"}, {"shape", json::array({2})}, {"data_offsets", {0, 8}}}},
            {"e", {{"dtype", "F32"}, {"shape", json::array({0})}, {"data_offsets", {8, 8}}}},
            {"b", {{"dtype", "F32"}, {"shape", json::array({2})}, {"data_offsets", {8, 16}}}}};
  EXPECT_NO_THROW(
      SafetensorsFile(write("ok.safetensors", with_header(header.dump(), std::string(16, '\0')))));
}

// ---------------------------------------------------------------------------------------------------------
// Directories and sharded checkpoints.

TEST_F(SafetensorsTest, ShardedDirectory) {
  write("model-00001-of-00002.safetensors", build({{"a", "F32", {2}, bytes_of<float>({1, 2})},
                                                   {"b", "BF16", {1}, bytes_of<uint16_t>({0x4000})}}));
  write("model-00002-of-00002.safetensors", build({{"c", "I32", {3}, bytes_of<int32_t>({7, 8, 9})}}));
  json index = {{"metadata", {{"total_size", 18}}},
                {"weight_map",
                 {{"a", "model-00001-of-00002.safetensors"},
                  {"b", "model-00001-of-00002.safetensors"},
                  {"c", "model-00002-of-00002.safetensors"}}}};
  write("model.safetensors.index.json", index.dump());
  SafetensorsArchive ar = SafetensorsArchive::open_dir(dir_.string());
  EXPECT_EQ(ar.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(ar.contains("c"));
  EXPECT_FALSE(ar.contains("d"));
  EXPECT_THAT(ar.file_of("a"), HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_THAT(ar.file_of("c"), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ar.get("a").f32()[1], 2.0f);
  EXPECT_EQ(ar.get("b").to_f32().f32()[0], 2.0f);
  EXPECT_EQ(ar.get("c").data<int32_t>()[2], 9);
  EXPECT_EQ(ar.info("c").shape, (Shape{3}));
  EXPECT_EQ(ar.total_bytes(), 8u + 2u + 12u);
  EXPECT_THROW(ar.get("d"), Error);
  EXPECT_THROW(ar.info("d"), Error);
  EXPECT_THROW(ar.file_of("d"), Error);
}

TEST_F(SafetensorsTest, IndexOnlyExposesListedTensors) {
  write("s1.safetensors",
        build({{"a", "F32", {1}, bytes_of<float>({1})}, {"extra", "F32", {1}, bytes_of<float>({2})}}));
  write("model.safetensors.index.json", json{{"weight_map", {{"a", "s1.safetensors"}}}}.dump());
  SafetensorsArchive ar = SafetensorsArchive::open_dir(dir_.string());
  EXPECT_EQ(ar.names(), std::vector<std::string>{"a"});
}

TEST_F(SafetensorsTest, IndexNamingAMissingShard) {
  write("s1.safetensors", build({{"a", "F32", {1}, bytes_of<float>({1})}}));
  write("model.safetensors.index.json",
        json{{"weight_map", {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}}}.dump());
  expect_dir_error({"s2.safetensors", "missing"});
}

TEST_F(SafetensorsTest, IndexNamingATensorNotInItsShard) {
  write("s1.safetensors", build({{"a", "F32", {1}, bytes_of<float>({1})}}));
  write("s2.safetensors", build({{"b", "F32", {1}, bytes_of<float>({1})}}));
  write("model.safetensors.index.json",
        json{{"weight_map", {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}}}}.dump());
  expect_dir_error({"s1.safetensors", "\"b\"", "not in the file"});
}

TEST_F(SafetensorsTest, BadIndexFiles) {
  write("s1.safetensors", build({{"a", "F32", {1}, bytes_of<float>({1})}}));
  write("model.safetensors.index.json", "{\"weight_map\": ");
  expect_dir_error({"model.safetensors.index.json", "invalid JSON"});
  write("model.safetensors.index.json", json{{"metadata", {}}}.dump());
  expect_dir_error({"model.safetensors.index.json", "weight_map"});
  write("model.safetensors.index.json", json{{"weight_map", {{"a", 3}}}}.dump());
  expect_dir_error({"model.safetensors.index.json", "\"a\""});
  write("model.safetensors.index.json", json{{"weight_map", {{"a", "../s1.safetensors"}}}}.dump());
  expect_dir_error({"model.safetensors.index.json", "outside"});
  write("model.safetensors.index.json", json{{"weight_map", json::object()}}.dump());
  expect_dir_error({"no safetensors weights"});
}

TEST_F(SafetensorsTest, CorruptShardNamesTheShard) {
  write("s1.safetensors", build({{"a", "F32", {1}, bytes_of<float>({1})}}));
  std::string bad = build({{"b", "F32", {4}, bytes_of<float>({1, 2, 3, 4})}});
  write("s2.safetensors", bad.substr(0, bad.size() - 4));
  write("model.safetensors.index.json",
        json{{"weight_map", {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}}}.dump());
  expect_dir_error({"s2.safetensors", "\"b\"", "truncated"});
}

TEST_F(SafetensorsTest, DirectoryWithoutIndex) {
  write("model.safetensors", build({{"a", "F32", {1}, bytes_of<float>({1})}}));
  write("other.safetensors", build({{"z", "F32", {1}, bytes_of<float>({1})}}));
  // model.safetensors wins when present.
  EXPECT_EQ(SafetensorsArchive::open_dir(dir_.string()).names(), std::vector<std::string>{"a"});
  fs::remove(dir_ / "model.safetensors");
  write("golden.safetensors", build({{"g", "F32", {1}, bytes_of<float>({1})}}));
  write("another.safetensors", build({{"y", "F32", {1}, bytes_of<float>({1})}}));
  // Otherwise every *.safetensors except golden.safetensors.
  EXPECT_EQ(SafetensorsArchive::open_dir(dir_.string()).names(), (std::vector<std::string>{"y", "z"}));
  SafetensorsArchive single = SafetensorsArchive::open_file((dir_ / "golden.safetensors").string());
  EXPECT_EQ(single.names(), std::vector<std::string>{"g"});
}

TEST_F(SafetensorsTest, MissingOrEmptyDirectory) {
  expect_dir_error({"no safetensors weights"});
  EXPECT_THROW(SafetensorsArchive::open_dir((dir_ / "nope").string()), Error);
}

// ---------------------------------------------------------------------------------------------------------
// Fuzz-ish robustness: damaged files load consistently or throw dsinfer::Error, nothing else.

std::string fuzz_base() {
  std::vector<float> a(6), c(5);
  for (int i = 0; i < 6; ++i) a[i] = static_cast<float>(i) * 0.5f;
  for (int i = 0; i < 5; ++i) c[i] = static_cast<float>(-i);
  return build({{"model.layers.0.w", "F32", {2, 3}, bytes_of(a)},
                {"model.layers.0.b", "BF16", {3}, bytes_of<uint16_t>({0x3f80, 0x4000, 0x4040})},
                {"model.layers.0.q", "F8_E4M3", {2, 2}, bytes_of<uint8_t>({0x38, 0x40, 0x48, 0x50})},
                {"lm_head", "F32", {5}, bytes_of(c)}},
               {{"format", "pt"}});
}

// Checks the invariants of a file that opened: every tensor lies inside the file and matches its shape.
void check_consistent(const SafetensorsFile& f) {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& [name, info] : f.tensors()) {
    ASSERT_EQ(info.nbytes, static_cast<size_t>(shape_numel(info.shape)) * dtype_size(info.dtype)) << name;
    ASSERT_LE(info.offset + info.nbytes, f.file_size()) << name;
    Tensor t = f.get(name);
    ASSERT_EQ(t.nbytes(), info.nbytes);
    if (info.nbytes && info.nbytes < (1u << 20)) {
      // Touch every byte (would fault if the view lay outside the mapping).
      volatile uint8_t sum = 0;
      const auto* p = static_cast<const uint8_t*>(t.raw());
      for (size_t i = 0; i < info.nbytes; ++i) sum = static_cast<uint8_t>(sum + p[i]);
      if (info.dtype != DType::F32) (void)t.to_f32();
      if (info.nbytes) ranges.emplace_back(info.offset, info.offset + info.nbytes);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) ASSERT_LE(ranges[i - 1].second, ranges[i].first) << "overlap";
}

TEST_F(SafetensorsTest, FuzzTruncationAtEveryLength) {
  const std::string base = fuzz_base();
  const std::string path = (dir_ / "fuzz.safetensors").string();
  for (size_t len = 0; len < base.size(); ++len) {
    write("fuzz.safetensors", base.substr(0, len));
    try {
      SafetensorsFile f(path);
      ADD_FAILURE() << "truncation to " << len << " of " << base.size() << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(path)) << len;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "length " << len << ": non-dsinfer exception " << e.what();
    }
  }
  write("fuzz.safetensors", base);
  SafetensorsFile f(path);
  check_consistent(f);
  EXPECT_EQ(f.tensors().size(), 4u);
}

TEST_F(SafetensorsTest, FuzzHeaderByteFlips) {
  const std::string base = fuzz_base();
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(base[i]);
  const size_t span = 8 + header_len;
  const std::string path = (dir_ / "flip.safetensors").string();
  std::mt19937 rng(20240607);
  const char interesting[] = {'0', '1', '9', '-', '.', 'e', '"',  '{',
                              '}', '[', ']', ',', ':', ' ', '\0', '\xff'};
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = base;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % span;
      bytes[pos] = (rng() % 2) ? static_cast<char>(rng()) : interesting[rng() % sizeof(interesting)];
    }
    write("flip.safetensors", bytes);
    try {
      SafetensorsFile f(path);
      ++opened;
      check_consistent(f);
      if (HasFailure()) {
        ADD_FAILURE() << "inconsistent file accepted at iteration " << iter;
        return;
      }
    } catch (const Error& e) {
      ++rejected;
      EXPECT_THAT(e.what(), HasSubstr(path));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": non-dsinfer exception " << e.what();
      return;
    }
  }
  // Both outcomes occur: flips inside names or padding keep the file valid, most others break it.
  EXPECT_GT(opened, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace dsinfer
