#!/usr/bin/env bash
# Runs sglmock fleet behind the llm-d router's endpoint picker (EPP), with
# eppcheck playing Envoy, in a private network namespace (loopback only),
# and prints the routing figures: first with --layout addresses (routing,
# the flush check, chat), then with --layout ports (routing), then with
# ext_proc over TLS, the picker's default (routing).
#
#   EPP_BIN=/path/to/epp fleet/eppcheck/run-router.sh
#
# EPP_BIN is an endpoint picker you built from the llm-d router's source
# (github.com/llm-d/llm-d-router, tag v0.10.0: CGO_ENABLED=0 go build
# ./cmd/epp); this repository does not build it. Without EPP_BIN the script
# skips, saying so. It builds sglmock and eppcheck from this checkout, needs
# unshare(1) and ip(8), and leaves nothing running. WORK=DIR keeps the logs
# and files there (default: a temporary directory, removed at the end).
set -euo pipefail

if [ -z "${EPP_BIN:-}" ]; then
  echo "skip: EPP_BIN is not set. Build the llm-d router's endpoint picker (llm-d-router v0.10.0:" \
    "CGO_ENABLED=0 go build ./cmd/epp) and run EPP_BIN=/path/to/epp $0" >&2
  exit 0
fi
if [ ! -x "$EPP_BIN" ]; then
  echo "EPP_BIN=$EPP_BIN is not an executable file" >&2
  exit 2
fi

# Outside the namespace: build, then run this script again inside one.
if [ -z "${SGLMOCK_IN_NETNS:-}" ]; then
  here=$(cd "$(dirname "$0")" && pwd)
  root=$(cd "$here/../.." && pwd)
  work=${WORK:-$(mktemp -d)}
  mkdir -p "$work"
  [ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
  echo "building sglmock and eppcheck into $work" >&2
  (cd "$root" && go build -o "$work/sglmock" ./cmd/sglmock)
  (cd "$here" && go build -o "$work/eppcheck" .)
  unshare_flags=-n
  [ "$(id -u)" = 0 ] || unshare_flags=-rn # a user namespace gives the rights to set up loopback
  SGLMOCK_IN_NETNS=1 WORK="$work" EPP_BIN=$(realpath "$EPP_BIN") unshare $unshare_flags -- bash "$0" "$@"
  exit $?
fi

work=$WORK
ip link set lo up
pids=()
stop_all() {
  for pid in "${pids[@]}"; do
    kill -INT "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
trap stop_all EXIT

# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN.
wait_for() {
  for _ in $(seq $(($3 * 10))); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1:" >&2
  tail -20 "$1" >&2
  return 1
}

# phase NAME LAYOUT EPP_EDIT EPPCHECK_ARGS...: a fleet of 3, the picker on
# the command line the fleet prints (EPP_EDIT, if not empty, is a sed
# expression applied to it; scores and debug logs are added, as evidence),
# then eppcheck; then the picker's log is searched for what must not be
# there.
phase() {
  local name=$1 layout=$2 edit=$3
  shift 3
  local dir=$work/$name
  mkdir -p "$dir"
  echo
  echo "######## $name: sglmock fleet --layout $layout behind the endpoint picker"
  "$work/sglmock" fleet --replicas 3 --layout "$layout" --profile default --page-size 16 --speedup 100 \
    --enable-cache-report --served-model-name mock --dir "$dir/fleet" >"$dir/fleet.out" 2>"$dir/fleet.log" &
  pids+=($!)
  if ! wait_for "$dir/fleet.out" '^  epp --config-file' 60; then
    cat "$dir/fleet.log" >&2
    stop_all
    return 1
  fi
  cat "$dir/fleet.out"
  local cmd
  cmd=$(grep '^  epp --config-file' "$dir/fleet.out")
  cmd=${cmd#  epp }
  [ -z "$edit" ] || cmd=$(sed "$edit" <<<"$cmd")
  echo "starting: $EPP_BIN $cmd --emit-endpoint-scores -v 4"
  # shellcheck disable=SC2086 # the printed command line, word-split as a shell would
  "$EPP_BIN" $cmd --emit-endpoint-scores -v 4 >"$dir/epp.log" 2>&1 &
  pids+=($!)
  local rc=0
  "$work/eppcheck" --endpoints "$dir/fleet/endpoints.yaml" --model mock "$@" || rc=$?
  stop_all
  echo
  echo "== the picker's log ($dir/epp.log)"
  # Each of these in the log fails the phase: the generated files must start
  # the picker with no deprecation and be read with no error.
  local n
  for pattern in 'DEPRECATION' 'unknown field' 'Failed to parse message' 'Failed to get request key' \
    'Failed to add event' 'cache_config_info'; do
    n=$(grep -c -- "$pattern" "$dir/epp.log" || true)
    printf '%-36s %s lines\n' "$pattern" "$n"
    [ "$n" = 0 ] || rc=1
  done
  printf '%-36s %s lines\n' 'All blocks cleared event received' "$(grep -c -- 'All blocks cleared event received' "$dir/epp.log" || true)"
  grep -m 3 'All blocks cleared event received' "$dir/epp.log" | cut -c1-300 || true
  return $rc
}

rc=0
phase addresses addresses "" --checks route,flush,chat || rc=1
phase ports ports "" --checks route --prompts 8 --sends 2 || rc=1
# The picker's default, ext_proc over TLS with a self-signed certificate.
phase tls addresses 's/ --secure-serving=false//' --tls --checks route --prompts 8 --sends 2 || rc=1
echo
if [ $rc = 0 ]; then echo "all phases passed"; else echo "some phase failed (see above)"; fi
exit $rc
