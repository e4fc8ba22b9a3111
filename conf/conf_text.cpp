// STRATA_CONF parsed once (strata/conf_text.hpp): the list of the layers'
// sections and the parse that checks every item against the section that
// owns its key.
#include "strata/conf_text.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "strata/allocator_options.hpp"
#include "strata/bucket_options.hpp"
#include "strata/integration_options.hpp"
#include "strata/prefetch_options.hpp"
#include "strata/tier_options.hpp"

namespace strata {

namespace {

bool owned(std::string_view key) {
  return std::ranges::any_of(conf_sections(),
                             [&](const conf_section* s) { return s->has_key(key); });
}

status unknown_key(std::string_view key) {
  std::string keys;
  for (const conf_section* s : conf_sections()) {
    for (std::string_view k : s->keys()) keys += (keys.empty() ? "" : ", ") + std::string(k);
  }
  return {errc::invalid_argument,
          "STRATA_CONF: unknown key '" + std::string(key) + "'; accepted keys: " + keys};
}

}  // namespace

std::span<const conf_section* const> conf_sections() {
  static const std::array<const conf_section*, 5> sections{
      &allocator_conf_section(), &tier_conf_section(), &prefetch_conf_section(),
      &bucket_conf_section(), &integration_conf_section()};
  return sections;
}

result<conf_text> conf_text::parse(std::string_view text) {
  auto items = parse_option_list(text, ':', "STRATA_CONF", "device");
  if (!items) return items.error();
  conf_text out;
  for (const option& item : *items) {
    if (!owned(item.key)) return unknown_key(item.key);
    out.items_.emplace_back(item.key, item.value);
  }
  for (const conf_section* s : conf_sections()) {
    if (auto checked = s->check(out); !checked) return checked;
  }
  return out;
}

result<conf_text> conf_text::from_env() {
  const char* env = std::getenv("STRATA_CONF");  // NOLINT(concurrency-mt-unsafe): read-only
  return parse(env != nullptr ? env : "");
}

}  // namespace strata
