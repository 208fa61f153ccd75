#!/usr/bin/env bash
# dryrun.sh: tries remote.sh here, as far as a machine without a GPU allows, on the bundles pack.sh
# made: a copy of the tree that travels, with one call's carry at a time, in a scratch folder
# standing for the GPU machine (its own E2E_DIR and OUT per call), under a CPython 3.12 that has
# none of the tool's dependencies (so only the carried wheels can meet them).
#
# Calls, as README.md orders them: setup + prepare (the sha256 checks, the install with no index,
# the requirement check, fetch and patch from the carried mirror offline for the ref project and
# the known-bad one, the plans); one chunk call per model slice; model (join, check, 'model pull'
# through the find-links folder). Then the background machinery with a step that fails soon (the
# reference step with CUDACXX pointing nowhere: CMake's configure stops it before any compile), a
# wait cut by the call's budget, a refused start, damaged carries and a fresh machine, each of
# which must fail as it should. No CUDA is compiled.
# Each call's $OUT is checked against what a call can bring back (8 files, 16 MiB each, names).
#
# usage: benchmarks/cuda-h200/dryrun.sh   Environment: PY312 (a CPython 3.12; default python3.12,
# else pyenv's 3.12), SIM (the scratch folder; default a new one, kept for a look).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SIM=${SIM:-$(mktemp -d)}
is312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
if [ -z "${PY312:-}" ]; then
  for c in "$(command -v python3.12)" "$(pyenv prefix 3.12 2>/dev/null | tail -1)/bin/python3"; do
    if [ -x "$c" ] && is312 "$c"; then PY312=$c; break; fi
  done
fi
[ -n "${PY312:-}" ] && is312 "$PY312" || { echo "dryrun: no CPython 3.12 (set PY312)"; exit 1; }
[ -d "$REPO/.carry/tool" ] || { echo "dryrun: no .carry/: run pack.sh first"; exit 1; }

fails=0
ok() { printf 'dryrun: ok   %s\n' "$*"; }
bad() { printf 'dryrun: FAIL %s\n' "$*"; fails=$((fails + 1)); }
call=0
# CARRY...: lay the tree anew with only these .carry folders, as one call would have it.
lay() {
  rm -rf "$SIM/repo" && mkdir -p "$SIM/repo/.carry"
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -C "$SIM/repo" -xf -
  local c
  for c in "$@"; do cp -a "$REPO/.carry/$c" "$SIM/repo/.carry/"; done
}
# EXPECTED_EXIT ACTION...: one call of remote.sh.
remote() {
  local want=$1 rc
  shift
  call=$((call + 1))
  (cd "$SIM/repo" && E2E_DIR="${E2E:-$SIM/e2e}" OUT="$SIM/out/$call" PYTHON="$PY312" \
    bash benchmarks/cuda-h200/remote.sh "$@") >"$SIM/call-$call.log" 2>&1
  rc=$?
  if [ "$rc" = "$want" ]; then ok "call $call ($*): exit $rc"; else bad "call $call ($*): exit $rc, expected $want"; tail -20 "$SIM/call-$call.log"; fi
  check_out "$SIM/out/$call"
}
check_out() { # what a call brings back: at most 8 files of 16 MiB, 2 folders down, plain names
  local d=$1 n
  n=$(find "$d" -type f | wc -l)
  [ "$n" -le 8 ] || bad "$d: $n files (at most 8 come back)"
  ! find "$d" -type f -size +16M | grep -q . || bad "$d: a file over 16 MiB"
  ! find "$d" -mindepth 3 -type f | grep -q . || bad "$d: a file more than 2 folders down"
  ! find "$d" -name '*[!A-Za-z0-9._-]*' | grep -q . || bad "$d: a name with other characters"
}

echo "dryrun: scratch folder $SIM; Python $("$PY312" --version 2>&1)"
"$PY312" -c 'import yaml' 2>/dev/null && echo "dryrun: note: this Python has PyYAML of its own"

lay src tool
remote 0 setup prepare
grep -q "every requirement of onebit-build" "$SIM/call-$call.log" && ok "requirements met from the carried wheels" \
  || bad "no requirement check line"
[ "$(grep -c 'fetch .* ok .*(mirror-dir)' "$SIM/call-$call.log")" = 2 ] && ok "both sources came from the carried mirror, offline" \
  || bad "a fetch did not come from the carried mirror"
grep -q "0004-known-bad-kernel" "$SIM/e2e/logs/plan-bad.txt" && ok "the known-bad project's plan has patch 0004" \
  || bad "the known-bad project's plan lacks patch 0004"

n=$(ls -d "$REPO"/.carry/model-* | wc -l)
for k in $(seq 0 $((n - 1))); do
  lay "model-$k"
  remote 0 chunk
done
lay
remote 0 model status
grep -q "sha256 a5fd3b62" "$SIM/call-$call.log" && ok "model pull joined the recipe's model" || bad "model pull did not report the model's sha256"

# The background machinery, with a step that stops before compiling anything: CMake's configure
# fails on the missing compiler (the tool's exit 9). A budget of 0 s ends the first wait at once
# (exit 75: a budget of 1 s lost the race to a configure that failed within seconds); the next
# call's wait brings the step's own exit back.
lay
CUDACXX=/nonexistent/nvcc CALL_BUDGET_S=0 remote 75 start:reference wait:reference
grep -q "reference: started in the background" "$SIM/call-$call.log" && ok "the reference step ran in the background" \
  || bad "the reference step did not start in the background"
remote 9 wait:reference status
grep -q "going on" "$SIM/call-$call.log" && grep -q "== status" "$SIM/call-$call.log" \
  && ok "a failed step does not stop the actions after it" || bad "the actions after a failed step did not run"
grep -q "CUDACXX" "$SIM/e2e/logs/reference.log" && ok "the step's log names the missing compiler" \
  || bad "the step's log does not name CUDACXX"
grep -q "^reference" "$SIM/out/$call/times.tsv" && ok "times.tsv records the background step" || bad "no reference line in times.tsv"
# No reference yet: refused. The projects' copies of a committed references/cuda/*.json would
# count as one, so they go first (CUDACXX as above, should the refusal fail: nothing compiles).
rm -f "$SIM"/e2e/proj/second/references/cuda/*.json
CUDACXX=/nonexistent/nvcc remote 1 start:second
grep -q "no reference yet" "$SIM/call-$call.log" && ok "the second build waits for a reference" \
  || bad "the second build started without a reference"
remote 2 nosuchaction

# start:smoke must start smoke, and only once no build runs. (remote.sh once started the
# known-bad build instead: needs() set its loop variable $s, which was act_start's own.) The
# reference step is marked passed and a sleep stands for a known-bad build still running; the
# smoke step itself then stops at once (CMake finds no CUDA compiler: nothing is compiled).
echo 0 >"$SIM/e2e/state/reference.rc"
sleep 600 &
held=$!
echo "$held" >"$SIM/e2e/state/bad.pid" && rm -f "$SIM/e2e/state/bad.rc"
lay
remote 1 start:smoke
grep -q "bad is still building: wait:bad first" "$SIM/call-$call.log" && ok "smoke waits while the known-bad build runs" \
  || bad "smoke did not refuse to start beside a running build"
kill "$held" && wait "$held" 2>/dev/null
echo 137 >"$SIM/e2e/state/bad.rc"
CUDACXX=/nonexistent/nvcc remote 9 start:smoke wait:smoke
grep -q "smoke: started in the background" "$SIM/call-$call.log" && grep -q "^smoke" "$SIM/out/$call/times.tsv" \
  && ok "start:smoke started smoke" || bad "start:smoke did not start smoke"
! grep -q "bad: started" "$SIM/call-$call.log" && [ "$(cat "$SIM/e2e/state/bad.rc")" = 137 ] \
  && ok "start:smoke left the known-bad step alone" || bad "start:smoke started the known-bad build"
rm -f "$SIM/e2e/state/reference.rc"

# Damaged carries must be refused.
lay model-0
printf 'x' | dd of="$SIM/repo/.carry/model-0/model.tar.00" bs=1 seek=1000 conv=notrunc status=none
remote 1 chunk
# A missing slice: the model action must say so.
rm -f "$SIM"/e2e/model/model.tar.02
lay
remote 1 model
# A fresh machine (nothing kept): every action but setup says to start again (exit 3).
lay model-1
E2E="$SIM/fresh" remote 3 chunk
grep -q "start again with setup" "$SIM/call-$call.log" && ok "a fresh machine is named as such" || bad "no word of a fresh machine"
lay src tool
echo extra >"$SIM/repo/.carry/tool/wheels/extra.txt"
remote 1 setup

echo
echo "dryrun: $fails failure(s); logs in $SIM/call-*.log, outputs in $SIM/out/"
[ "$fails" = 0 ]
