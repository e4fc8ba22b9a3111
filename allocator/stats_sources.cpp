#include "stats_sources.hpp"

#include <algorithm>
#include <cstdio>

namespace strata {

std::uint64_t stats_sources::add(std::string section, source read) {
  std::lock_guard lock(mu_);
  const std::uint64_t id = next_++;
  list_.push_back({id, std::move(section), std::make_shared<const source>(std::move(read))});
  return id;
}

status stats_sources::remove(std::uint64_t id) {
  std::lock_guard lock(mu_);
  if (std::erase_if(list_, [&](const entry& e) { return e.id == id; }) == 0) {
    return {errc::invalid_argument,
            "remove_stats_source: no stats source with id " + std::to_string(id)};
  }
  return {};
}

std::vector<std::pair<std::string, stat_map>> stats_sources::read() {
  std::vector<std::pair<std::string, std::shared_ptr<const source>>> sources;
  {
    std::lock_guard lock(mu_);
    for (const entry& e : list_) sources.emplace_back(e.section, e.read);
  }
  std::vector<std::pair<std::string, stat_map>> out;
  out.reserve(sources.size());
  for (auto& [section, read] : sources) out.emplace_back(std::move(section), (*read)());
  return out;
}

void stats_sources::merge_into(stat_map& into) {
  for (const auto& [section, counters] : read()) {
    for (const auto& [name, value] : counters) {
      std::string key = section;
      key += '.';
      key += name;
      into[key] = value;
    }
  }
}

std::string stats_sources::summary() {
  std::string out;
  const std::string rule(77, '-');
  char line[128];
  for (const auto& [section, counters] : read()) {
    std::snprintf(line, sizeof line, "| %-75s |\n", section.substr(0, 75).c_str());
    out += line;
    out += '|' + rule + "|\n";
    std::vector<std::string> cells;
    cells.reserve(counters.size());
    for (const auto& [name, value] : counters) cells.push_back(name + ": " + std::to_string(value));
    for (std::size_t i = 0; i < cells.size(); i += 2) {
      std::snprintf(line, sizeof line, "| %-36s | %-36s |\n", cells[i].substr(0, 36).c_str(),
                    i + 1 < cells.size() ? cells[i + 1].substr(0, 36).c_str() : "");
      out += line;
    }
    out += '|' + std::string(77, '=') + "|\n";
  }
  return out;
}

}  // namespace strata
