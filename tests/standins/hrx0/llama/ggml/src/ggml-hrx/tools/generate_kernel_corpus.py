"""Stand-in for the fork's kernel corpus step: every kernel through loom-format, then loom-link,
embedded as bytes in a C file."""

import argparse
import pathlib
import subprocess
import tempfile

ap = argparse.ArgumentParser()
for opt in ("--loom-link", "--loom-format", "--kernels", "--output"):
    ap.add_argument(opt, required=True)
a = ap.parse_args()
data = b""
with tempfile.TemporaryDirectory() as tmp:
    for kernel in sorted(pathlib.Path(a.kernels).glob("*.loom")):
        formatted, linked = pathlib.Path(tmp) / "f.loom", pathlib.Path(tmp) / "l.loombc"
        subprocess.run([a.loom_format, str(kernel), "-o", str(formatted)], check=True)
        subprocess.run([a.loom_link, str(formatted), "-o", str(linked)], check=True)
        data += linked.read_bytes()
body = ", ".join(str(b) for b in data)
pathlib.Path(a.output).write_text(f"const unsigned char ggml_hrx_corpus[] = {{{body}}};\n"
                                  f"const int ggml_hrx_corpus_bytes = {len(data)};\n")
