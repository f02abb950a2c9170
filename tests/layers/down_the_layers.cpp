// Compiled with the domain's view of the tree (build/layers/opgate_operations):
// the storage port and common/ are below the domain, so these compile
// (`layers_view` test), which shows the failure of up_the_layers.cpp is the
// layering and not a broken view.
#include "common/result.h"
#include "operations/state_machine.h"
#include "store/port.h"
