// PickleWriter: the few pickle opcodes (protocol 2) a flight-recorder dump
// needs: dicts, lists, 2-tuples of strings, str, int, float, bool, None.
// Python's pickle.load and torch's analyser read what it writes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace collie {

class PickleWriter {
 public:
  PickleWriter();
  void begin_dict();  // then key, value, key, value...
  void end_dict();
  void begin_list();
  void end_list();
  void str(std::string_view s);
  void integer(int64_t v);
  void real(double v);
  void boolean(bool v);
  void none();
  void tuple2(std::string_view a, std::string_view b);
  // The pickle, with its STOP opcode.
  std::string finish();

 private:
  std::string out_;
};

}  // namespace collie
