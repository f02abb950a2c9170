// The signals the daemon acts on, taken synchronously: blocked before any
// thread starts, so every thread inherits the mask, then waited for in one
// place. SIGTERM and SIGINT drain and stop; SIGHUP reloads the
// configuration; SIGUSR1 is the daemon's own: its store stopped accepting
// writes, so it stops and exits for the service manager to restart it.
#pragma once

#include <signal.h>

namespace opgate {

// Blocks SIGTERM, SIGINT, SIGHUP and SIGUSR1 in the calling thread and
// returns the set.
sigset_t block_daemon_signals();
// Waits until one of `set` arrives; returns its number.
int wait_for_signal(const sigset_t& set);

}  // namespace opgate
