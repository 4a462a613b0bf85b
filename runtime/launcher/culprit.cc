#include "collie/runtime/launcher/culprit.h"

#include <algorithm>
#include <map>
#include <set>

namespace collie::launcher {

std::optional<NamedCulprit> find_named_culprit(const std::vector<WorkerResult>& workers) {
  std::map<int, std::set<int>> named_by;  // named rank -> ranks naming it
  std::map<int, const ErrorRecord*> example;
  for (const WorkerResult& w : workers) {
    if (w.exit.ok() || !w.error_record) continue;
    const ErrorRecord& record = *w.error_record;
    if (record.cause != FailureCause::kTimeoutUnresponsive) continue;
    for (int rank : record.culprit_ranks()) {
      if (rank == w.place.global_rank) continue;
      named_by[rank].insert(w.place.global_rank);
      example.emplace(rank, &record);
    }
  }
  if (named_by.empty()) return std::nullopt;
  auto most = std::max_element(named_by.begin(), named_by.end(), [](const auto& a, const auto& b) {
    return a.second.size() < b.second.size();  // max_element keeps the first (lowest) of a tie
  });
  const ErrorRecord& record = *example.at(most->first);
  NamedCulprit culprit{.rank = most->first,
                       .named_by = {most->second.begin(), most->second.end()},
                       .message = record.message};
  for (const FailureCulprit& c : record.culprits)
    if (c.global_rank == most->first) culprit.address = c.address;
  return culprit;
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
