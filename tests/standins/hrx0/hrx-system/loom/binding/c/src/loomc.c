#include "loomc/loomc.h"

int loomc_version(void) { return 1; }
