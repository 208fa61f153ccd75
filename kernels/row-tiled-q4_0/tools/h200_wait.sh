#!/usr/bin/env bash
# Waits for a background h200_e2e.sh run (its OUTDIR/DONE) for at most SECONDS, then copies what it
# has into DEST: e2e.log always, results.tar.gz (the whole OUTDIR) once it is done.
# usage: kernels/row-tiled-q4_0/tools/h200_wait.sh OUTDIR DEST SECONDS     exit 0: done, 3: still running
RES=$1
DEST=$2
LIMIT=${3:-540}
T0=$(date +%s)
while [ ! -f "$RES/DONE" ] && [ $(( $(date +%s) - T0 )) -lt "$LIMIT" ]; do
    sleep 5
done
mkdir -p "$DEST"
cp "$RES/e2e.log" "$DEST/" 2>/dev/null
tail -25 "$RES/e2e.log" 2>/dev/null
if [ -f "$RES/DONE" ]; then
    tar -C "$RES" -czf "$DEST/results.tar.gz" .
    echo "DONE"
    exit 0
fi
echo "STILL RUNNING after ${LIMIT}s"
exit 3
