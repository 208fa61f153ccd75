#include <dlfcn.h>
#include <stdlib.h>
#include "hrx_runtime.h"

/* As upstream's libhsa.c: IREE_HAL_AMDGPU_LIBHSA_PATH first, then the canonical names from
   the loader's search path. */
static void *load_libhsa(void) {
  const char *env = getenv("IREE_HAL_AMDGPU_LIBHSA_PATH");
  void *lib = (env && *env) ? dlopen(env, RTLD_NOW) : NULL;
  if (!lib) lib = dlopen("libhsa-runtime64.so.1", RTLD_NOW);
  if (!lib) lib = dlopen("libhsa-runtime64.so", RTLD_NOW);
  return lib;
}

const char *hrx_gpu_name(void) {
  void *lib = load_libhsa();
  const char *(*name)(void) = lib ? (const char *(*)(void))dlsym(lib, "hsa_standin_agent_name") : NULL;
  return name ? name() : NULL;
}

/* The AMDGPU driver asks the agent whether its queues are PM4-emulated
   (HSA_AMD_AGENT_INFO_PM4_EMULATION); a runtime that rejects the query leaves no device. */
int hrx_gpu_device_count(void) {
#if defined(HRX_HAS_IREE_AMDGPU_DRIVER)
  void *lib = load_libhsa();
  int (*hsa_init)(void) = lib ? (int (*)(void))dlsym(lib, "hsa_init") : NULL;
  int (*pm4)(int *) = lib ? (int (*)(int *))dlsym(lib, "hsa_standin_pm4_emulation") : NULL;
  int emulated = 0;
  if (!hsa_init || hsa_init() != 0 || !pm4 || pm4(&emulated) != 0) return 0;
  return 1;
#else
  return 0;
#endif
}
