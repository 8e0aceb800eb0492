// Installs tests/tiny_models.h pipelines into a GUI Engine (LibTorch side of the UI tests).
#include "tests/ui/tiny_engine.h"

#include "tests/tiny_models.h"

namespace varscope::testing {

void install_tiny_model(gui::Engine& engine, bool small) {
    gui::ModelSource src;
    src.kind = gui::ModelSource::Kind::Custom;
    src.custom_name = small ? "small-random" : "tiny-random";
    engine.set_pipeline(std::make_unique<VarPipeline>(small ? small_pipeline() : tiny_pipeline()),
                        src);
}

}  // namespace varscope::testing
