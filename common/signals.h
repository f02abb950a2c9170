// Stop signals (SIGTERM, SIGINT) taken synchronously: block them before any
// thread starts, so every thread inherits the mask, then wait in one place.
#pragma once

#include <signal.h>

namespace opgate {

// Blocks SIGTERM and SIGINT in the calling thread and returns the set.
sigset_t block_stop_signals();
// Waits until one of `set` arrives; returns its number.
int wait_for_stop_signal(const sigset_t& set);

}  // namespace opgate
