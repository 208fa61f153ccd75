/* Stand-in for libhsa-runtime64.so.1, the HSA runtime HRX loads with dlopen. Built twice:
   TheRock's answers the PM4 emulation probe; with HSA_DISTRO, a distribution's, which rejects
   it on gfx1151 (HSA_STATUS_ERROR_INVALID_ARGUMENT), so HRX registers no device. */
#include <stdlib.h>

int hsa_init(void) { return 0; }

const char *hsa_standin_agent_name(void) {
  const char *g = getenv("HSA_STANDIN_AGENT");
  return g && *g ? g : "gfx1151";
}

int hsa_standin_pm4_emulation(int *emulated) {
#if defined(HSA_DISTRO)
  (void)emulated;
  return 0x1001;
#else
  *emulated = 0;
  return 0;
#endif
}
