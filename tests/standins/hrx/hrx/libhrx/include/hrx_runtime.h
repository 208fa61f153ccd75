#ifndef HRX_RUNTIME_H
#define HRX_RUNTIME_H
/* GPUs the runtime can use: none without the AMDGPU driver or the HSA runtime. */
int hrx_gpu_device_count(void);
/* The GPU's name as the HSA runtime reports it (NULL without one). */
const char *hrx_gpu_name(void);
const char *hrx_version(void);
#endif
