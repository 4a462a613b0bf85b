// The corpus replayer: links against a fuzz target's LLVMFuzzerTestOneInput
// in place of libFuzzer's main, so that the normal (g++) build runs every
// committed corpus file through the same driver the fuzzer uses. Arguments
// are files or folders (every regular file inside, not recursive).
//
// A target signals a broken promise by aborting (__builtin_trap), exactly as
// under libFuzzer, so a failing input ends this process with a signal; the
// file being replayed is printed before each run so the log names it. A
// replay that finds no file at all fails too: an empty or misplaced corpus
// must not pass as a clean run.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (const auto& e : fs::directory_iterator(arg))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(arg, ec)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a folder\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "replay: no corpus files found in the arguments\n");
    return 1;
  }
  // A fixed order makes a failure reproducible from the log.
  std::sort(files.begin(), files.end());
  size_t bytes = 0;
  for (const auto& f : files) {
    const std::vector<uint8_t> data = read_all(f);
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), data.size());
    LLVMFuzzerTestOneInput(data.data(), data.size());
    bytes += data.size();
  }
  std::printf("replay: %zu files, %zu bytes, all passed\n", files.size(), bytes);
  return 0;
}
