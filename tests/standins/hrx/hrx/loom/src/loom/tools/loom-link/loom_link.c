#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* loom-link INPUT --mode=selective --root=@SYMBOL --to=bytecode --output=FILE
   Links the kernel SYMBOL of the module INPUT into deterministic bytecode that records
   INPUT as it was given, like the real tool. */
static int usage(const char *problem, const char *arg) {
  fprintf(stderr, "loom-link: %s '%s'\n", problem, arg);
  return 2;
}

static char *read_all(const char *path, long *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    buf = malloc((size_t)*size + 1);
    if (buf && fread(buf, 1, (size_t)*size, f) != (size_t)*size) { free(buf); buf = NULL; }
    if (buf) buf[*size] = 0;
  }
  fclose(f);
  return buf;
}

int main(int argc, char **argv) {
  const char *in = NULL, *mode = NULL, *root = NULL, *to = NULL, *out = NULL;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (strncmp(a, "--mode=", 7) == 0) mode = a + 7;
    else if (strncmp(a, "--root=", 7) == 0) root = a + 7;
    else if (strncmp(a, "--to=", 5) == 0) to = a + 5;
    else if (strncmp(a, "--output=", 9) == 0) out = a + 9;
    else if (strcmp(a, "--strip-check") == 0) continue;
    else if (a[0] == '-') return usage("unknown option", a);
    else if (in) return usage("more than one input", a);
    else in = a;
  }
  if (!in) return usage("missing input", "");
  if (!mode || strcmp(mode, "selective") != 0) return usage("unknown --mode", mode ? mode : "");
  if (!root || root[0] != '@') return usage("--root must name a symbol", root ? root : "");
  if (!to || strcmp(to, "bytecode") != 0) return usage("unsupported --to", to ? to : "");
  if (!out || !*out) return usage("missing --output", "");
  long size = 0;
  char *text = read_all(in, &size);
  if (!text) { perror(in); return 1; }
  char *wanted = malloc(strlen(root) + 2);
  if (!wanted) return 1;
  strcpy(wanted, root);
  strcat(wanted, "(");
  if (!strstr(text, wanted)) { fprintf(stderr, "loom-link: no symbol %s in %s\n", root, in); return 1; }
  FILE *fo = fopen(out, "wb");
  if (!fo) { perror(out); return 1; }
  unsigned long h = 2166136261UL;
  int ok = fprintf(fo, "LOOMBC1\nsource %s\nroot %s\n", in, root) > 0;
  for (long i = 0; i < size; ++i) {
    h = ((h ^ (unsigned char)text[i]) * 16777619UL) & 0xffffffffUL;
    ok = ok && fputc(text[i] ^ 0x5a, fo) != EOF;
  }
  ok = ok && fprintf(fo, "\nhash %08lx\n", h) > 0;
  free(wanted);
  free(text);
  return (fclose(fo) == 0 && ok) ? 0 : 1;
}
