#!/usr/bin/env bash
# `make test`'s tests: one pytest process, its vLLM servers pinned to CPU 0 (KVGATE_TEST_CPU;
# tests/conftest.py), the client and pytest free to run beside them. KVGATE_TEST_PARALLEL=1 on 2 CPUs
# or more runs two pytest processes side by side instead, each pinning its vLLM servers to a CPU of
# its own (group A: the modules that launch vLLM most, and the demo, whose profile pins CPU 0; group
# B: the rest), faster (on 2 AVX-512 cores: 26:06 and 24:25 side by side, 35:33 for all 954 tests in
# one process); but then two engines and both groups' clients share 2 cores, and the live runs'
# timing checks see it: a CI run so saw vLLM's API server deliver a first token 3.1 s after its
# engine made it (its /metrics answered 2.7 s late), a FAIL of the client-vs-server check that is
# the test layout's, not the server's. No longer faster either (2026-12-07): group A had run
# 34 of its 127 in 26 min, 47 s a test where one process takes 24 s a start-up. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
A=(tests/test_vllm_live.py tests/test_validate_live.py tests/test_freeze.py tests/test_faults_stub.py)
# the tiny models, built once before both start (their progress bars go to a log, kept on failure)
if ! $PY -m validator.tinymodels --dir models >/tmp/kvgate-models.$$.log 2>&1; then
  cat /tmp/kvgate-models.$$.log; rm -f /tmp/kvgate-models.$$.log; exit 1
fi
rm -f /tmp/kvgate-models.$$.log
if [ "$(nproc)" -lt 2 ] || [ "${KVGATE_TEST_PARALLEL:-0}" != 1 ]; then
  exec $PY -m pytest -q -ra --durations=40 "$@"  # the slowest 40: where CI's minutes go
fi
logs=$(mktemp -d)
ignore=()
for f in "${A[@]}"; do ignore+=(--ignore "$f"); done
KVGATE_TEST_CPU=0 $PY -m pytest -q -ra -p no:cacheprovider "${A[@]}" "$@" >"$logs/a.log" 2>&1 &
a=$!
KVGATE_TEST_CPU=1 $PY -m pytest -q -ra -p no:cacheprovider "${ignore[@]}" "$@" >"$logs/b.log" 2>&1 &
b=$!
trap 'kill $a $b 2>/dev/null; wait; exit 130' INT TERM
wait $a; ra=$?
wait $b; rb=$?
echo "== group A (vLLM on CPU 0): ${A[*]}"; cat "$logs/a.log"
echo "== group B (vLLM on CPU 1): the other modules"; cat "$logs/b.log"
rm -rf "$logs"
[ $ra -eq 0 ] && [ $rb -eq 0 ] && echo "== make test: both groups passed" && exit 0
echo "== make test: FAILED (group A exit $ra, group B exit $rb)"
exit 1
