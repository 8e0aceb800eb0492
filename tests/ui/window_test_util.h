// What the window tests share (Qt side, Torch-free): the loader that installs the tiny models
// for the Custom sources and loads any other source, and waiting for the window's job.
#pragma once

#include <QSignalSpy>

#include "tests/ui/tiny_engine.h"
#include "ui/main_window.h"

namespace varscope::testing {

constexpr int kJobTimeoutMs = 120000;

inline void test_loader(gui::Engine& e, const gui::ModelSource& s) {
    if (s.kind == gui::ModelSource::Kind::Custom)
        install_tiny_model(e, s.custom_name == "small-random");
    else
        e.load(s);
}

// True once the window has no job running (at once when it has none), false on a timeout.
inline bool wait_job(gui::MainWindow& w) {
    if (!w.busy()) return true;
    QSignalSpy spy(&w, &gui::MainWindow::jobFinished);
    return spy.wait(kJobTimeoutMs) || !w.busy();
}

}  // namespace varscope::testing
