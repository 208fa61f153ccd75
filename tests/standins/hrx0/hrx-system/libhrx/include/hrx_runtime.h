#pragma once
/* The part of libhrx's API the ggml-hrx stand-in calls. */
int hrx_gpu_device_count(void);
const char *hrx_gpu_name(void);
