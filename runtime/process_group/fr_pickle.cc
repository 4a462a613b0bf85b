#include "collie/runtime/process_group/fr_pickle.h"

#include <cstring>

namespace collie {
namespace {

// Opcodes (Python's Lib/pickletools.py documents each).
constexpr char kProto = '\x80', kMark = '(', kStop = '.', kEmptyDict = '}', kSetItems = 'u',
               kEmptyList = ']', kAppends = 'e', kBinUnicode = 'X', kBinInt = 'J', kLong1 = '\x8a',
               kBinFloat = 'G', kNone = 'N', kTrue = '\x88', kFalse = '\x89', kTuple2 = '\x86';

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i) & 0xff));
}

}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(kProto);
  out_.push_back('\x02');
}

// A dict or list is EMPTY_DICT MARK <items> SETITEMS: items are pushed
// after the mark and added in one step.
void PickleWriter::begin_dict() {
  out_.push_back(kEmptyDict);
  out_.push_back(kMark);
}
void PickleWriter::end_dict() { out_.push_back(kSetItems); }
void PickleWriter::begin_list() {
  out_.push_back(kEmptyList);
  out_.push_back(kMark);
}
void PickleWriter::end_list() { out_.push_back(kAppends); }

void PickleWriter::str(std::string_view s) {
  out_.push_back(kBinUnicode);
  put_le(out_, s.size(), 4);
  out_.append(s);
}

void PickleWriter::integer(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back(kBinInt);
    put_le(out_, static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    return;
  }
  out_.push_back(kLong1);  // little-endian two's complement, 8 bytes
  out_.push_back('\x08');
  put_le(out_, static_cast<uint64_t>(v), 8);
}

void PickleWriter::real(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  out_.push_back(kBinFloat);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>(bits >> (8 * i) & 0xff));
}

void PickleWriter::boolean(bool v) { out_.push_back(v ? kTrue : kFalse); }
void PickleWriter::none() { out_.push_back(kNone); }

void PickleWriter::tuple2(std::string_view a, std::string_view b) {
  str(a);
  str(b);
  out_.push_back(kTuple2);
}

std::string PickleWriter::finish() {
  out_.push_back(kStop);
  return std::move(out_);
}

}  // namespace collie
