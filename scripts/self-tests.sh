#!/usr/bin/env bash
# The suite's own self-tests on a fresh machine: brings what the report.html checks need (Debian's chromium,
# installed with apt-get when no chromium is on the PATH), then runs `pytest tests -n 2` (printing the 20 slowest) with any extra
# pytest arguments (e.g. scripts/self-tests.sh -k mutation). .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "self-tests: chromium is needed for the report.html checks and there is no apt-get to install it:" \
         "install chromium with your package manager" >&2
    exit 4
  fi
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "self-tests: installing Debian's chromium (the report.html render checks need it)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
exec python -m pytest tests -n 2 --durations=20 "$@"   # the slowest tests, so a CI log shows where its 60 minutes go
