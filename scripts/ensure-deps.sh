#!/usr/bin/env bash
# Installs what building and testing the module needs and is missing: redis-server and
# redis-cli (the tests run a real server), libclang (bindgen, used by the redis-module crate
# at build time), a C compiler (the clock-step tests build an LD_PRELOAD library), and
# python3 with venv, node and npm (the client tests run redis-py and ioredis).
# Installs through apt-get when it can; otherwise says what to install.
#
# Extra tools a target needs (make leak-check: valgrind) are named as arguments; each is a
# command and the Debian package of the same name.
set -euo pipefail

missing=()
for tool in "$@"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
# The clock-step tests compile a small LD_PRELOAD library of their own.
command -v cc >/dev/null 2>&1 || missing+=(gcc)
# The client tests (tests/clients/) run redis-py in a venv and ioredis with npm.
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
have_libclang=no
for f in /usr/lib/llvm-*/lib/libclang.so /usr/lib/*/libclang.so /usr/lib/*/libclang-*.so; do
  [ -e "$f" ] && have_libclang=yes
done
[ -n "${LIBCLANG_PATH:-}" ] && have_libclang=yes
[ $have_libclang = yes ] || missing+=(libclang-dev)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian's package starts a system redis on 6379 through the service manager when it can;
  # the tests use their own servers, so a running system one is left as it is.
  exit 0
fi

echo "ensure-deps: missing ${missing[*]}." >&2
echo "  On Debian or Ubuntu: sudo apt-get install ${missing[*]}" >&2
echo "  Elsewhere: install redis-server (7.0 or later), libclang and a C compiler for your system." >&2
exit 1
