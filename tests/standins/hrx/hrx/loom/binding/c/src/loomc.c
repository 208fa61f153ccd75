#include <string.h>
#include "loomc/loomc.h"
int loomc_version(void) { return 1; }
int loomc_link_module(const char *name) { return (int)strlen(name); }
