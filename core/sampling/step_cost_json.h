// The cost model's per-part values as JSON (core/sampling/step_cost.h): one object keyed by
// cost_part_name, as `bench e2e`'s cost model and the app's run history write them.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/sampling/step_cost.h"

namespace varscope {

inline nlohmann::json cost_parts_json(const std::array<double, kCostParts>& v) {
    nlohmann::json j = nlohmann::json::object();
    for (int p = 0; p < kCostParts; ++p) j[cost_part_name(static_cast<CostPart>(p))] = v[p];
    return j;
}

// The part a JSON key names; nullopt for no part.
inline std::optional<CostPart> cost_part_named(const std::string& name) {
    for (int p = 0; p < kCostParts; ++p)
        if (name == cost_part_name(static_cast<CostPart>(p))) return static_cast<CostPart>(p);
    return std::nullopt;
}

}  // namespace varscope
