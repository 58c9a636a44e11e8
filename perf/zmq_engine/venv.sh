#!/usr/bin/env bash
# Creates (once) the Python venv that runs perf/zmq_engine/engine.py and
# selftest.py, then prints the path of its python on stdout -- and nothing
# else on stdout, so callers can do: PY=$(perf/zmq_engine/venv.sh).
#
# The venv lives at ${TOLLGATE_ZMQ_ENGINE_VENV:-/var/tmp/tollgate-zmq-engine-venv},
# outside the repository, so it survives `cargo clean` and is shared by every
# test process. It is rebuilt when requirements.txt changes: the sha256 of the
# requirements file is stamped inside the venv. Concurrent callers (parallel
# tests) serialise on a flock(1) lock file beside the venv, so only one of
# them builds and the others wait and then reuse it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
req="$here/requirements.txt"
venv="${TOLLGATE_ZMQ_ENGINE_VENV:-/var/tmp/tollgate-zmq-engine-venv}"
venv="${venv%/}"
lock="$venv.lock"
stamp="$venv/.tollgate-requirements.sha256"
python="${PYTHON:-python3}"

log() { echo "zmq_engine/venv.sh: $*" >&2; }

want="$(sha256sum "$req" | cut -d' ' -f1)"

mkdir -p "$(dirname "$venv")"
exec 9>"$lock"
flock 9

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

log "building $venv (requirements sha256 $want)"
# The stamp is written last, so a build killed half-way leaves a venv without
# a stamp, which the next caller wipes and rebuilds.
rm -rf "$venv"
"$python" -m venv "$venv" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet \
    -r "$req" >&2
echo "$want" > "$stamp"
log "ready"
echo "$venv/bin/python"
