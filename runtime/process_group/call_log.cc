#include "collie/runtime/process_group/call_log.h"

#include <charconv>

#include "collie/base/str_cat.h"

namespace collie {
namespace {

constexpr std::string_view kMagic = "collie-calls 1";

bool parse_u64(std::string_view text, uint64_t* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (int r : ranks) parts.push_back(std::to_string(r));
  return str_cat(ranks.size() == 1 ? "rank " : "ranks ", join(parts, ", "));
}

}  // namespace

uint64_t CallLog::issue(std::string signature) {
  std::lock_guard lock(mu_);
  recent_.push_back(std::move(signature));
  if (recent_.size() > window_) recent_.pop_front();
  return ++issued_;
}

void CallLog::complete(uint64_t seq) {
  std::lock_guard lock(mu_);
  if (seq > completed_) completed_ = seq;
}

uint64_t CallLog::issued() const {
  std::lock_guard lock(mu_);
  return issued_;
}

uint64_t CallLog::completed() const {
  std::lock_guard lock(mu_);
  return completed_;
}

std::string CallLog::signature(uint64_t seq) const {
  std::lock_guard lock(mu_);
  const uint64_t first = issued_ - recent_.size() + 1;
  if (seq < first || seq > issued_) return "";
  return recent_[seq - first];
}

std::string CallLog::record() const {
  std::lock_guard lock(mu_);
  recorded_issued_ = issued_;
  recorded_completed_ = completed_;
  std::string out = str_cat(kMagic, "\nissued ", issued_, "\ncompleted ", completed_, "\n");
  uint64_t seq = issued_ - recent_.size() + 1;
  for (const auto& s : recent_) out += str_cat(seq++, " ", s, "\n");
  return out;
}

bool CallLog::changed() const {
  std::lock_guard lock(mu_);
  return issued_ != recorded_issued_ || completed_ != recorded_completed_;
}

std::optional<CallLog::Record> CallLog::parse(std::string_view text) {
  Record r;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;  // records end with a newline
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    const size_t space = line.find(' ');
    const std::string_view head = line.substr(0, space);
    const std::string_view rest =
        space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    switch (line_no++) {
      case 0:
        if (line != kMagic) return std::nullopt;
        break;
      case 1:
        if (head != "issued" || !parse_u64(rest, &r.issued)) return std::nullopt;
        break;
      case 2:
        if (head != "completed" || !parse_u64(rest, &r.completed)) return std::nullopt;
        break;
      default: {
        uint64_t seq = 0;
        if (!parse_u64(head, &seq)) return std::nullopt;
        r.recent[seq] = std::string(rest);
      }
    }
  }
  if (line_no < 3) return std::nullopt;
  return r;
}

std::optional<CallMismatch> first_mismatch(const CallLog::Record& a, const CallLog::Record& b) {
  for (const auto& [seq, sig] : a.recent) {
    auto it = b.recent.find(seq);
    if (it != b.recent.end() && it->second != sig) return CallMismatch{seq, sig, it->second};
  }
  return std::nullopt;
}

std::string describe_progress(uint64_t seq, int self,
                              const std::vector<std::optional<CallLog::Record>>& records) {
  std::vector<int> behind, stuck, done, silent;
  std::vector<std::string> behind_detail;
  for (int r = 0; r < static_cast<int>(records.size()); ++r) {
    if (r == self) continue;
    const auto& rec = records[r];
    if (!rec) {
      silent.push_back(r);
    } else if (rec->issued < seq) {
      behind.push_back(r);
      behind_detail.push_back(str_cat(r, " (last called #", rec->issued, ")"));
    } else if (rec->completed < seq) {
      stuck.push_back(r);
    } else {
      done.push_back(r);
    }
  }
  std::vector<std::string> parts;
  if (!behind.empty())
    parts.push_back(str_cat(behind.size() == 1 ? "rank " : "ranks ", join(behind_detail, ", "),
                            behind.size() == 1 ? " is" : " are", " behind: never called op #",
                            seq));
  if (!silent.empty())
    parts.push_back(str_cat(rank_list(silent),
                            " published no progress (dead, hung before its first collective, "
                            "or outside this group)"));
  if (!stuck.empty())
    parts.push_back(
        str_cat(rank_list(stuck), " called op #", seq, " and did not finish it either"));
  if (!done.empty()) parts.push_back(str_cat(rank_list(done), " finished op #", seq));
  if (parts.empty()) return "no other rank to ask";
  return join(parts, "; ");
}

}  // namespace collie
