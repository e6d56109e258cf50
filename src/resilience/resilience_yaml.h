// YAML readers of the resilience sections (circuit_breaker, watchdog, length_tiers, fault_injection): a table
// of sections, each a table of key readers, merged into the serve config file's section table.
#pragma once
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <string>

#include "resilience/resilience_config.h"

namespace dsinfer {

// Reads one key's node into the config; `where` ("FILE: section.key") prefixes every error.
using ResilienceKeyReader =
    std::function<void(const YAML::Node&, const std::string& where, ResilienceConfig&)>;
using ResilienceSection = std::map<std::string, ResilienceKeyReader>;

const std::map<std::string, ResilienceSection>& resilience_sections();

}  // namespace dsinfer
