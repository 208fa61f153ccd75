#include "hrx_runtime.h"

int loomc_amdgpu_target_count(void);
extern const int ggml_hrx2_embedded_count;

int ggml_hrx2_device_count(void) { return loomc_amdgpu_target_count() > 0 ? hrx_gpu_device_count() : 0; }
const char *ggml_hrx2_device_name(void) { return hrx_gpu_name(); }
int ggml_hrx2_artifact_count(void) { return ggml_hrx2_embedded_count; }
