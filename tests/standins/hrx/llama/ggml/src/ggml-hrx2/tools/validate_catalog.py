import argparse, json
from pathlib import Path

ap = argparse.ArgumentParser(description="check the assembled catalog")
ap.add_argument("--catalog", type=Path, required=True)
ap.add_argument("--source-root", type=Path, required=True)
ap.add_argument("--artifact-root", type=Path, required=True)
ap.add_argument("--require-artifacts", action="store_true")
a = ap.parse_args()


def need(ok, problem):
    if not ok:
        raise SystemExit("catalog: " + problem)


c = json.loads(a.catalog.read_text())
need(c.get("schema") == "ggml-hrx2-catalog-v1", "schema must be ggml-hrx2-catalog-v1")
sources, artifacts, routes = c.get("sources"), c.get("artifacts"), c.get("routes")
need(isinstance(sources, dict) and isinstance(artifacts, dict) and isinstance(routes, list),
     "sources and artifacts must be objects, routes an array")
src_root, art_root = a.source_root.resolve(), a.artifact_root.resolve()
for sid, s in sources.items():
    need((src_root / s["path"]).is_file(), f"source {sid} path does not exist: {s['path']}")
for aid, art in artifacts.items():
    need(art.get("format") in ("loom-bytecode", "amdgpu-hsaco"), f"artifact {aid} has an unsupported format")
    full = (art_root / art["path"]).resolve()
    need(art_root in full.parents, f"artifact {aid} escapes the artifact root")
    if a.require_artifacts:
        need(full.is_file(), f"artifact {aid} path does not exist: {art['path']}")
for r in routes:
    need(r.get("source_id") in sources and r.get("artifact_id") in artifacts, f"route {r.get('id')} references unknown ids")
    need(str(r.get("root_symbol", "")).startswith("@"), f"route {r.get('id')} root_symbol must be a symbol")
