#include <stdio.h>
#if defined(GGML_USE_HRX)
int ggml_hrx_device_count(void);
const char *ggml_hrx_device_name(void);
int ggml_hrx_corpus_size(void);
#endif

void ggml_print_devices(void) {
  printf("Available devices:\n");
#if defined(GGML_USE_HRX)
  if (ggml_hrx_device_count() > 0) printf("  HRX0: Stand-in Radeon 8060S Graphics (%s)\n", ggml_hrx_device_name());
#endif
#if defined(GGML_USE_VULKAN)
  printf("  Vulkan0: Stand-in Radeon 8060S Graphics (RADV STRIX_HALO)\n");
#endif
}

int ggml_kernel_corpus_size(void) {
#if defined(GGML_USE_HRX)
  return ggml_hrx_corpus_size();
#else
  return 0;
#endif
}
