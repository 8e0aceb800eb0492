// Input rules of the whole window, in one application event filter (no widget subclasses):
//  - the mouse wheel changes a spin box, slider or combo box only when it has the keyboard focus;
//    one the wheel merely scrolls past passes it on to its parent, so the panel scrolls instead
//    of a setting changing (and starting a run);
//  - the window's shortcuts with a modifier (Ctrl+E export, Ctrl+S save, Ctrl+Enter generate, ...)
//    work whatever widget has the focus: a widget that claims the same keys (on X11 key schemes a
//    line edit takes Ctrl+E as "end of line", so Ctrl+E in the prompt did not export) loses them.
#pragma once

#include <QObject>
#include <QPointer>

class QWidget;

namespace varscope::gui {

class InputGuard : public QObject {
    Q_OBJECT
  public:
    // Guards every widget of `window` (docks included, floating or not); the filter is removed
    // with `window`, its parent.
    explicit InputGuard(QWidget* window);

    // Whether the rule holds for w: a value widget (spin box, slider, combo box; not a scroll
    // bar) that takes the wheel only with the focus.
    static bool isValueWidget(const QObject* w);

  protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

  private:
    bool inWindow(const QWidget* w) const;
    QPointer<QWidget> window_;
};

}  // namespace varscope::gui
