// The files a training run keeps beside its checkpoints, each write checked:
//
//   config.json  the run's arguments, replaced whole (write_file_atomically)
//   log.txt      one JSON line per epoch, appended and flushed at once
//
// Both are written with nlohmann/json (json_line), laid out as Python's
// json.dumps lays out BLIP's: {"epoch": 0, "train_loss": 1.6, ...}.
//
// A failure throws collie::Error naming the file and the system's reason
// ("... log.txt: No space left on device (errno 28)"): a run never goes on,
// or exits 0, with its log or configuration silently lost.
//
// Where a run writes (output_dir_for): --output-dir when given; else a
// resumed run continues in its checkpoint's own folder, so that its log goes
// on and no other run's files are touched; else output/blip_train. An
// --evaluate run writes only where --output-dir says; without it, it only
// prints its result.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace collie::samples {

inline constexpr const char* kDefaultOutputDir = "output/blip_train";

// "" when the run writes no files (an --evaluate run without --output-dir).
std::string output_dir_for(const std::string& output_dir_flag, const std::string& resume,
                           bool evaluate);

// Before a run writes into `dir`: a folder that holds another run's work (a
// checkpoint, or a log with an epoch in it) is refused with InvalidArgument
// naming the folder and its files, unless `resume` is a checkpoint in that
// same folder (the run goes on) or `overwrite` (the old run's log.txt,
// config.json and checkpoints are removed first). A folder left by an
// attempt that finished no epoch (an empty log) is free.
void claim_output_dir(const std::string& dir, const std::string& resume, bool overwrite);

// Creates `dir` with its parents; throws Error naming it.
void create_output_dir(const std::string& dir);

// `value` on one line as Python's json.dumps writes it (", " between items,
// ": " after keys; strings escaped, numbers in their shortest exact form),
// the layout tools match with patterns such as '"samples_per_s": [0-9.e+]+'.
std::string json_line(const nlohmann::ordered_json& value);

// Replaces dir/config.json whole with json_line(config). Being the first
// file a run writes, it also finds a read-only or full folder before the
// first epoch.
void write_config_json(const std::string& dir, const nlohmann::ordered_json& config);

// log.txt, open for appending from the start of the run to its end.
class RunLog {
 public:
  // Opens (creating) `path`; throws Error naming it.
  explicit RunLog(std::string path);
  // Appends `line` and a newline, and flushes them to the file.
  void append(const std::string& line);
  const std::string& path() const { return path_; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
};

// The integer N of "key": N in a JSON object such as config.json; nullopt
// when the text is not a JSON object, or the key is absent or not an
// integer.
std::optional<int64_t> json_int(const std::string& json, const std::string& key);

}  // namespace collie::samples
