import argparse, json, subprocess
from pathlib import Path

ap = argparse.ArgumentParser(description="link every route's kernel with loom-link")
ap.add_argument("--catalog", type=Path, required=True)
ap.add_argument("--source-root", type=Path, required=True)
ap.add_argument("--artifact-root", type=Path, required=True)
ap.add_argument("--loom-link", type=Path, required=True)
a = ap.parse_args()
c = json.loads(a.catalog.read_text())
for route in c["routes"]:
    artifact = c["artifacts"][route["artifact_id"]]
    if artifact.get("format") != "loom-bytecode":
        continue
    source = a.source_root / c["sources"][route["source_id"]]["path"]
    output = a.artifact_root / artifact["path"]
    output.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(LOOM_LINK_ARGS, check=True)
