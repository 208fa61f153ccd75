import argparse, json
from pathlib import Path

ap = argparse.ArgumentParser(description="embed every loom-bytecode artifact")
ap.add_argument("--catalog", type=Path, required=True)
ap.add_argument("--source-root", type=Path, required=True)
ap.add_argument("--artifact-root", type=Path, required=True)
ap.add_argument("--out", type=Path, required=True)
a = ap.parse_args()
c = json.loads(a.catalog.read_text())
blobs = [(a.artifact_root / x["path"]).read_bytes() for x in c["artifacts"].values() if x["format"] == "loom-bytecode"]
a.out.write_text(
    f"const int ggml_hrx2_embedded_count = {len(blobs)};\n"
    f"const unsigned long ggml_hrx2_embedded_bytes = {sum(len(b) for b in blobs)}UL;\n")
