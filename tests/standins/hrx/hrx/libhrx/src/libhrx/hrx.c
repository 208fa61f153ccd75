#include <dlfcn.h>
#include <stdlib.h>
#include "hrx_runtime.h"

int iree_status_code_count(void);
#if defined(HRX_HAS_IREE_AMDGPU_DRIVER)
int iree_hal_amdgpu_aql_queue_mode(void);
#endif

const char *hrx_version(void) { return iree_status_code_count() > 0 ? "hrx stand-in 0.1.0" : "?"; }

/* As upstream's libhsa.c: IREE_HAL_AMDGPU_LIBHSA_PATH first, then the canonical names from
   the system search paths. */
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

int hrx_gpu_device_count(void) {
#if defined(HRX_HAS_IREE_AMDGPU_DRIVER)
  void *lib = load_libhsa();
  int (*hsa_init)(void) = lib ? (int (*)(void))dlsym(lib, "hsa_init") : NULL;
  if (!hsa_init || hsa_init() != 0) return 0;
  return iree_hal_amdgpu_aql_queue_mode() >= 0 ? 1 : 0;
#else
  return 0;
#endif
}
