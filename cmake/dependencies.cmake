# Third-party libraries (all from Debian bookworm packages, installed by scripts/setup.sh).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 CONFIG QUIET)
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
find_path(PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
# Static PCRE2 so that binaries carried to the GPU machine need no Debian package there.
find_library(PCRE2_LIBRARY NAMES libpcre2-8.a pcre2-8 REQUIRED)
# Static zlib for tokenizer.json.gz.
find_path(ZLIB_INCLUDE_DIR zlib.h REQUIRED)
find_library(ZLIB_STATIC_LIBRARY NAMES libz.a z REQUIRED)
# Static yaml-cpp for `dsinfer serve --config`.
find_path(YAML_CPP_INCLUDE_DIR yaml-cpp/yaml.h REQUIRED)
find_library(YAML_CPP_STATIC_LIBRARY NAMES libyaml-cpp.a yaml-cpp REQUIRED)
# Boost.Asio/Beast (header-only) for the HTTP server.
find_path(BOOST_BEAST_INCLUDE_DIR boost/beast.hpp REQUIRED)
find_package(GTest QUIET)
find_package(benchmark QUIET)

include(CheckLanguage)
set(DSINFER_HAVE_CUDA OFF)
if(DSINFER_ENABLE_CUDA)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(DSINFER_HAVE_CUDA ON)
    message(STATUS "dsinfer: CUDA backend enabled (${CMAKE_CUDA_COMPILER})")
  else()
    message(STATUS "dsinfer: no CUDA compiler found, building without the CUDA backend")
  endif()
endif()
