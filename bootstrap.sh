#!/usr/bin/env bash
# Set up this checkout on a Debian 12/13 or Ubuntu machine, then run the given command inside
# its virtual environment:
#
#   ./bootstrap.sh onebit-build        # the whole default job: build, smoke test, report
#   ./bootstrap.sh python -m pytest    # the test suite (.ci/run runs exactly this)
#
# 1. the system packages of system-packages.txt, when one of them is missing (as root, or
#    through sudo);
# 2. a virtual environment in .venv (kept when it is there);
# 3. the tool with its test extra, installed into it as an editable install.
set -euo pipefail
cd "$(dirname "$0")"

say() { printf 'bootstrap: %s\n' "$*" >&2; }

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  while read -r pkg; do
    [ -n "$pkg" ] || continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done < <(tr -s ' \t' '\n' < system-packages.txt)
else
  say "no dpkg on this machine: install the programs of system-packages.txt yourself"
fi

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    sudo() { "$@"; }  # a root shell needs no sudo (and a container often has none)
  elif ! command -v sudo >/dev/null 2>&1; then
    say "missing system packages: ${missing[*]}"
    say "run this script as root, or with sudo installed, to install them"
    exit 1
  fi
  say "installing system packages (${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  sudo apt-get update -qq
  sudo xargs -a system-packages.txt apt-get install -y -qq --no-install-recommends >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  say "making the virtual environment .venv"
  python3 -m venv .venv
fi
say "installing onebit-build and its test extra into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

if [ "$#" -gt 0 ]; then
  # The environment's own programs first, as after '. .venv/bin/activate'.
  export VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH"
  exec "$@"
fi
say "done: '. .venv/bin/activate', then 'onebit-build' or 'python -m pytest'"
