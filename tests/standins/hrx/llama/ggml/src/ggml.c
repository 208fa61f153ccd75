#include <stdio.h>
#if defined(GGML_USE_HRX2)
int ggml_hrx2_device_count(void);
const char *ggml_hrx2_device_name(void);
int ggml_hrx2_artifact_count(void);
#endif

int ggml_native_build(void) { return GGML_NATIVE_BUILD; }

void ggml_print_devices(void) {
  printf("Available devices:\n");
#if defined(GGML_USE_HRX2)
  if (ggml_hrx2_device_count() > 0) printf("  HRX20: Stand-in Radeon 8060S Graphics (%s)\n", ggml_hrx2_device_name());
#endif
#if defined(GGML_USE_VULKAN)
  printf("  Vulkan0: Stand-in Radeon 8060S Graphics (RADV STRIX_HALO)\n");
#endif
}

int ggml_kernel_count(void) {
#if defined(GGML_USE_HRX2)
  return ggml_hrx2_artifact_count();
#else
  return 0;
#endif
}
