#include "hrx_runtime.h"
#include "loomc/loomc.h"

extern const int ggml_hrx_corpus_bytes;

int ggml_hrx_device_count(void) { return loomc_version() > 0 ? hrx_gpu_device_count() : 0; }
const char *ggml_hrx_device_name(void) { return hrx_gpu_name(); }
int ggml_hrx_corpus_size(void) { return ggml_hrx_corpus_bytes; }
