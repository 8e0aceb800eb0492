// The one place that reads VARScope's environment variables: the VARSCOPE_* execution switches
// into an ExecPolicy (core/exec_policy.h), and VARSCOPE_RESOURCES into core's resource folder.
// The CLI (app/cli/main.cpp, run_report.h's exec_policy()) and the desktop app (ui/main.cpp,
// ui/engine) call it; nothing below app/ and ui/ reads the environment.
//
// One rule for every variable: unset or empty means the default; otherwise the value must be
// one the variable takes, exactly:
//   a switch takes 0 or 1;
//   a choice takes one of its names (lower case);
//   a row count takes a whole number >= 0, or auto.
// Anything else is an error that names the variable, the value and what it takes (a typo must
// not time the default while its author believes otherwise). The table (variables(), and
// docs/exec-policy.md) lists each variable with its values, its default and what it switches.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/exec_policy.h"

namespace varscope::exec_env {

struct Variable {
    const char* name;     // VARSCOPE_...
    const char* key;      // the ExecPolicy JSON key it sets (to_json); "" for VARSCOPE_RESOURCES
    const char* values;   // what it takes, e.g. "0 or 1"
    const char* meaning;  // one line: the default and what the other values do
};
// Every variable, in the order of docs/exec-policy.md.
const std::vector<Variable>& variables();

// The environment as a function (nullptr: not set), so that tests can pass their own.
using Lookup = std::function<const char*(const char* name)>;

// The policy the variables describe. Throws std::invalid_argument naming the variable for a
// value outside the rule, and for VARSCOPE_SM90_IMPL (its schedules were deleted:
// pruned-kernels.md).
ExecPolicy policy_from(const Lookup& env);
ExecPolicy policy_from_environment();

// VARSCOPE_RESOURCES ("" when unset or empty): the folder with the shipped models.
std::string resource_dir_from(const Lookup& env);
// At a program's start: hands VARSCOPE_RESOURCES to core (set_resource_dir_override).
void apply_resource_dir_from_environment();

}  // namespace varscope::exec_env
