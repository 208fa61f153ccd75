#include <stdio.h>
#include <string.h>

void ggml_print_devices(void);
int ggml_kernel_corpus_size(void);

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--list-devices") == 0) {
    ggml_print_devices();
    return 0;
  }
  printf("llama-server stand-in %s: HRX kernel corpus of %d bytes\n", BUILD_COMMIT, ggml_kernel_corpus_size());
  return 0;
}
