#include "loomc/loomc.h"
int loomc_amdgpu_target_count(void) { return loomc_link_module("gfx1151") > 0 ? 1 : 0; }
