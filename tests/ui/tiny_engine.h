#pragma once

#include "ui/engine/engine.h"

namespace varscope::testing {

// tiny_pipeline() (3 scales) or small_pipeline() (6 scales), source kind Custom.
void install_tiny_model(gui::Engine& engine, bool small = false);

}  // namespace varscope::testing
