import argparse, json
from pathlib import Path

ap = argparse.ArgumentParser(description="assemble the split catalog into one file")
ap.add_argument("--catalog-dir", type=Path, required=True)
ap.add_argument("--out", type=Path, required=True)
a = ap.parse_args()
d = a.catalog_dir
routes = []
for f in sorted((d / "routes").glob("*.json")):
    if f.name != "index.json":
        routes += json.loads(f.read_text())
by_id = {r["id"]: r for r in routes}
order = json.loads((d / "routes" / "index.json").read_text())
if sorted(order) != sorted(by_id):
    raise SystemExit("catalog: the routes index must list exactly the route ids")
catalog = {
    "schema": json.loads((d / "metadata.json").read_text())["schema"],
    "sources": json.loads((d / "sources.json").read_text()),
    "artifacts": json.loads((d / "artifacts.json").read_text()),
    "routes": [by_id[i] for i in order],
}
a.out.parent.mkdir(parents=True, exist_ok=True)
a.out.write_text(json.dumps(catalog, indent=1) + "\n")
