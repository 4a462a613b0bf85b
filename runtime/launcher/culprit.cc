#include "runtime/launcher/culprit.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

namespace collie::launcher {

std::vector<int> ranks_named_unresponsive(std::string_view line) {
  std::vector<int> ranks;
  if (line.find("stopped, hung or unreachable") == std::string_view::npos) return ranks;
  // "rank 2 (a:1) did not" or "ranks 2 (a:1), 5 (b:2) did not".
  static const std::regex verdict(R"(\branks? ((?:\d+ \([^)]*\)(?:, )?)+) did not\b)");
  static const std::regex one(R"((\d+) \()");
  const std::string text(line);
  std::smatch m;
  if (!std::regex_search(text, m, verdict)) return ranks;
  const std::string list = m[1];
  for (auto it = std::sregex_iterator(list.begin(), list.end(), one); it != std::sregex_iterator();
       ++it)
    ranks.push_back(std::stoi((*it)[1]));
  return ranks;
}

std::optional<NamedCulprit> find_named_culprit(const std::vector<WorkerResult>& workers) {
  std::map<int, std::set<int>> named_by;  // named rank -> ranks naming it
  std::map<int, std::string> example;
  for (const WorkerResult& w : workers) {
    if (w.exit.ok()) continue;
    for (const std::string& line : w.stderr_tail) {
      for (int rank : ranks_named_unresponsive(line)) {
        if (rank == w.place.global_rank) continue;
        named_by[rank].insert(w.place.global_rank);
        example.emplace(rank, line);
      }
    }
  }
  if (named_by.empty()) return std::nullopt;
  auto most = std::max_element(named_by.begin(), named_by.end(), [](const auto& a, const auto& b) {
    return a.second.size() < b.second.size();  // max_element keeps the first (lowest) of a tie
  });
  return NamedCulprit{.rank = most->first,
                      .named_by = {most->second.begin(), most->second.end()},
                      .line = example[most->first]};
}

void blame_named_culprit(AttemptResult& result) {
  if (result.outcome != AttemptOutcome::kFailed) return;
  std::optional<NamedCulprit> culprit = find_named_culprit(result.workers);
  if (!culprit) return;
  const auto& root = result.workers.at(static_cast<size_t>(result.first_failure));
  if (root.place.global_rank == culprit->rank) return;
  for (size_t i = 0; i < result.workers.size(); ++i)
    if (result.workers[i].place.global_rank == culprit->rank)
      result.first_failure = static_cast<int>(i);
  result.culprit = std::move(culprit);
}

}  // namespace collie::launcher
