// Precompiled header of the Qt side (no LibTorch here).
#pragma once

#include <QtCore/QtCore>
#include <QtGui/QtGui>
#include <QtWidgets/QtWidgets>
