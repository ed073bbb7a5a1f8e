#!/usr/bin/env bash
# Runs the client's test suite against real redis-server processes, once per redis-py
# version, each in its own venv under <repo>/target/clients/:
#
#   clients/python/run-tests.sh                 # redis-py 5.3.1 and 8.1.0
#   clients/python/run-tests.sh 8.1.0 -k loss   # one version; arguments after it go to pytest
#   clients/python/run-tests.sh --venv-only 8.1.0   # only make that venv (other tests use it)
#
# Needs python3 (with venv), redis-server and redis-cli (7.0+), and the module built
# (`make build`; REDIS_LOCK_MODULE overrides its path). Exits non-zero if any run fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/../.." && pwd))
module=${REDIS_LOCK_MODULE:-$repo/target/release/libredis_lock.so}
if [ ! -f "$module" ]; then
  echo "run-tests.sh: no module at $module: run 'make build' first" >&2
  exit 2
fi
for tool in python3 redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "run-tests.sh: $tool is missing" >&2; exit 2; }
done

venv_only=no
if [ "${1:-}" = --venv-only ]; then venv_only=yes; shift; fi
versions=()
while [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+(\.[0-9]+)*$ ]]; do versions+=("$1"); shift; done
[ ${#versions[@]} -gt 0 ] || versions=(5.3.1 8.1.0)

export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
status=0
for version in "${versions[@]}"; do
  venv=$repo/target/clients/python-redis-$version
  echo "== redis-py $version ($venv)"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q "redis==$version" "pytest>=7"
  # Reinstalled every run (not editable): the tests import the package as users get it.
  "$venv/bin/pip" install -q --force-reinstall --no-deps "$here"
  [ $venv_only = no ] || continue
  start=$(date +%s)
  if (cd "$here" && REDIS_LOCK_MODULE=$module "$venv/bin/python" -m pytest -q "$@"); then
    echo "== redis-py $version: passed in $(( $(date +%s) - start )) s"
  else
    echo "== redis-py $version: FAILED" >&2
    status=1
  fi
done
exit $status
