// Compiled with the domain's view of the tree (build/layers/opgate_operations):
// the daemon is above the domain, so this include must not be found. The
// `layers_enforced` test expects this file to fail to compile.
#include "daemon/config.h"
