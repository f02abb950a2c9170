// Names the calling thread (at most 15 characters show), so `top -H`, perf
// and debuggers tell the ingress, the committer and the worker apart.
#pragma once

#include <pthread.h>

#include <string>

namespace opgate {

inline void name_this_thread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace opgate
