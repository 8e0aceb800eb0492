#include "ui/input_guard.h"

#include <QAbstractSlider>
#include <QAbstractSpinBox>
#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QDockWidget>
#include <QKeyEvent>
#include <QScrollBar>
#include <QWidget>

namespace varscope::gui {

InputGuard::InputGuard(QWidget* window) : QObject(window), window_(window) {
    qApp->installEventFilter(this);
}

bool InputGuard::isValueWidget(const QObject* w) {
    return qobject_cast<const QAbstractSpinBox*>(w) || qobject_cast<const QComboBox*>(w) ||
           (qobject_cast<const QAbstractSlider*>(w) && !qobject_cast<const QScrollBar*>(w));
}

bool InputGuard::inWindow(const QWidget* w) const {
    // Through the window boundaries of floating docks, not into dialogs (their own keys).
    for (; w; w = w->parentWidget()) {
        if (w == window_) return true;
        if (w->isWindow() && !qobject_cast<const QDockWidget*>(w)) return false;
    }
    return false;
}

bool InputGuard::eventFilter(QObject* watched, QEvent* event) {
    switch (event->type()) {
        case QEvent::Polish:
            // Qt gives the focus to a WheelFocus widget under the wheel before any filter sees
            // the event; StrongFocus (tab and click) keeps the wheel from taking it.
            if (isValueWidget(watched)) {
                auto* w = static_cast<QWidget*>(watched);
                if (w->focusPolicy() == Qt::WheelFocus && inWindow(w))
                    w->setFocusPolicy(Qt::StrongFocus);
            }
            break;
        case QEvent::Wheel:
            if (isValueWidget(watched)) {
                auto* w = static_cast<QWidget*>(watched);
                if (!w->hasFocus() && inWindow(w)) {
                    // Ignored: QApplication offers it to the parents (the scroll area scrolls).
                    event->ignore();
                    return true;
                }
            }
            break;
        case QEvent::ShortcutOverride: {
            auto* w = qobject_cast<QWidget*>(watched);
            if (!window_ || !w || !inWindow(w)) break;
            auto* key = static_cast<QKeyEvent*>(event);
            if (!(key->modifiers() & (Qt::ControlModifier | Qt::AltModifier | Qt::MetaModifier)))
                break;  // plain keys are the widget's (typing, Esc in a line edit, ...)
            // Ctrl+Enter on the keypad is the shortcut Ctrl+Enter.
            const QKeySequence pressed(
                QKeyCombination(key->modifiers() & ~Qt::KeypadModifier, Qt::Key(key->key())));
            for (const QAction* a : window_->actions())
                if (a->isEnabled() && a->shortcuts().contains(pressed)) {
                    // Not accepted, not seen by the widget: the shortcut fires.
                    event->ignore();
                    return true;
                }
            break;
        }
        default:
            break;
    }
    return QObject::eventFilter(watched, event);
}

}  // namespace varscope::gui
