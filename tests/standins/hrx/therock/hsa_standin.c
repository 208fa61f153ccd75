/* Stand-in for TheRock's libhsa-runtime64.so.1: what the HRX runtime stand-in loads with
   dlopen. It names the GPU the way the hardware would; HSA_STANDIN_AGENT plays another one. */
#include <stdlib.h>

int hsa_init(void) { return 0; }

const char *hsa_standin_agent_name(void) {
  const char *g = getenv("HSA_STANDIN_AGENT");
  return g && *g ? g : "gfx1151";
}
