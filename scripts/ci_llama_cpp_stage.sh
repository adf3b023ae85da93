#!/usr/bin/env bash
# CI stage: judge a second real speculative engine, llama.cpp's server (AR vs draft-simple, AR vs ngram-simple).
#
# Passes when the suite ran to completion and wrote its reports with no harness errors
# (`judge_run` in fixtures/servers/managed.py: pytest exit 2/3/4/5, missing or incomplete report,
# crashed workers, lost findings, failed tests without findings, findings whose error_kind shows
# the suite broke, speculative routes without inventory/acceptance profile), and the adapter
# self-tests against the live servers passed. Route findings (pytest exit 1) are data about
# llama.cpp and do not fail the stage. The servers are stopped on every exit path (trap).
# llama-server is built once per machine (~10+ min on 2 cores) and cached with the GGUF files under
# ~/.cache/spec-route-suite/llama.cpp/<version>; later runs start in seconds.
#
# Environment: SPEC_SUITE_LLAMA_CPP_REPORT_DIR (default reports/out/llama-cpp-ci/<UTC stamp>),
# SPEC_SUITE_LLAMA_CPP_WORKERS (pytest -n, default 8), SPEC_SUITE_LLAMA_CPP_PYTEST_ARGS (extra
# args, default "--detect-tv 0.1"), SPEC_SUITE_LLAMA_CPP_SUITE_TIMEOUT (seconds, default 1500),
# plus SPEC_SUITE_LLAMA_CPP_HOME / SPEC_SUITE_LLAMA_CPP_STATE read by fixtures.servers.llama_cpp.
set -uo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

ROUTES=routes/llama-cpp.toml
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
REPORT_DIR=${SPEC_SUITE_LLAMA_CPP_REPORT_DIR:-reports/out/llama-cpp-ci/$STAMP}
WORKERS=${SPEC_SUITE_LLAMA_CPP_WORKERS:-8}
SERVERS="python -m spec_route_suite.fixtures.servers.llama_cpp --routes $ROUTES"
mkdir -p "$REPORT_DIR"
TIMINGS="$REPORT_DIR/ci-timings.tsv"
: > "$TIMINGS"
STAGE_START=$(date +%s)

timed() {  # timed NAME CMD... : run, record seconds, return the command's exit code
    local name=$1; shift
    local t0=$(date +%s)
    "$@"
    local rc=$?
    printf '%s\t%s\t%s\n' "$name" "$(( $(date +%s) - t0 ))" "$rc" >> "$TIMINGS"
    return $rc
}

cleanup() {
    local rc=$?
    echo "== llama-cpp: stop servers =="
    $SERVERS stop || echo "warning: stop reported a problem" >&2
    printf 'total\t%s\t%s\n' "$(( $(date +%s) - STAGE_START ))" "$rc" >> "$TIMINGS"
    echo "== llama-cpp: timings (step, seconds, exit code) =="
    cat "$TIMINGS"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { echo "HARNESS ERROR: $*" >&2; exit 3; }

echo "== llama-cpp: build llama-server (cached after the first time) =="
timed install $SERVERS install || fail "llama-server could not be built"

echo "== llama-cpp: start servers (AR, draft-simple, ngram-simple) =="
timed start_servers $SERVERS start || fail "servers did not come up (logs: ~/.cache/spec-route-suite/llama-cpp-servers/logs)"

echo "== llama-cpp: adapter self-tests against the live servers =="
timed self_tests python -m pytest tests/test_llama_cpp.py --llama-cpp -q -p no:cacheprovider
SELF_RC=$?

echo "== llama-cpp: route suite against both speculative routes =="
# --detect-tv 0.1 keeps the distribution budget to a few minutes on 2 cores (as in the vLLM stage);
# the hard timeout turns a hung suite into a harness error (exit 124).
# shellcheck disable=SC2086
timed route_suite timeout "${SPEC_SUITE_LLAMA_CPP_SUITE_TIMEOUT:-1500}" \
    spec-route-suite -n "$WORKERS" --routes "$ROUTES" --report-dir "$REPORT_DIR" \
    ${SPEC_SUITE_LLAMA_CPP_PYTEST_ARGS:---detect-tv 0.1}
SUITE_RC=$?
echo "route suite exit code: $SUITE_RC (0 passed, 1 route findings = data about llama.cpp)"

RUN_DIR=$(ls -1dt "$REPORT_DIR"/*/ 2>/dev/null | while read -r d; do [ -f "$d/report.json" ] && echo "$d" && break; done)
if [ -n "$RUN_DIR" ]; then
    timed profile $SERVERS profile --run-dir "$RUN_DIR" > /dev/null \
        || echo "warning: could not write llama-servers.json" >&2
fi

echo "== llama-cpp: judgement =="
$SERVERS judge --report-dir "$REPORT_DIR" --exit-code "$SUITE_RC"
JUDGE_RC=$?
if [ -n "$RUN_DIR" ] && [ -f "$RUN_DIR/summary.md" ]; then
    echo "== llama-cpp: summary ($RUN_DIR) =="
    cat "$RUN_DIR/summary.md"
    cp "$TIMINGS" "$RUN_DIR/ci-timings.tsv"
fi
if [ "$SELF_RC" -ne 0 ]; then
    echo "HARNESS ERROR: adapter self-tests against llama.cpp failed (exit $SELF_RC)" >&2
    exit 3
fi
[ "$JUDGE_RC" -eq 0 ] || exit 3
exit 0
