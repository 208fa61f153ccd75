/* Stand-in for loom-link, loom-format and iree-benchmark-loom: '<tool> <input> -o <output>'
   copies the input with a header that names the tool (the fork's corpus step runs the first two). */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 4 || strcmp(argv[2], "-o") != 0) {
    fprintf(stderr, "%s: usage: %s <input> -o <output>\n", TOOL_NAME, TOOL_NAME);
    return 2;
  }
  FILE *in = fopen(argv[1], "rb");
  FILE *out = in ? fopen(argv[3], "wb") : NULL;
  if (!out) {
    fprintf(stderr, "%s: cannot open %s\n", TOOL_NAME, in ? argv[3] : argv[1]);
    return 1;
  }
  fprintf(out, "; %s\n", TOOL_NAME);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
  fclose(in);
  return fclose(out) == 0 ? 0 : 1;
}
