#!/usr/bin/env bash
# What one integration-test run left behind: containers, volumes, networks, and built and snapshot images whose sbx.owner
# label starts with sbx-test-<run>- (test/fixtures/run.ts names every test owner so), and
# processes the tests started that still run (found by SBX_TEST_RUN=<run> in their environment,
# which every process a test worker starts inherits: child control planes, sbx mcp, a private
# redis-server).
#
#   test/leftovers.sh RUN            list them; exit 1 when there are any, 0 when none
#   test/leftovers.sh --remove RUN   remove them (containers with their volumes, then volumes,
#                                    networks; processes by pid with SIGKILL), then list as above
#
# Used by the vitest global teardown (test/fixtures/global-setup.ts) and by .ci/run after the
# suite. Touches nothing of another run or another checkout: only labels with this run's prefix.
set -euo pipefail

remove=0
if [[ "${1:-}" == --remove ]]; then remove=1; shift; fi
run="${1:-}"
[[ "$run" =~ ^[0-9a-f]{8}$ ]] || { echo "usage: $0 [--remove] RUN (8 hex characters, the run's SBX_TEST_RUN)" >&2; exit 2; }
prefix="sbx-test-$run-"
# An engine that does not answer would make every list below empty: that is no proof of a clean run.
docker info >/dev/null 2>&1 || { echo "leftovers.sh: the Docker engine does not answer; cannot check run $run" >&2; exit 1; }

# kind: container | volume | network | image. Prints "ID OWNER" of each object of this run. An
# image by its name (a test image is named after its owner, `sbx-test-<run>-<name>:<tag>`,
# test/fixtures/images.ts) or by its `sbx.owner` label: test images carry it too, so one that lost
# its name (untagged while a container still used it) is found, and so is an image sbx built for
# one of its owners (`POST /v1/images` labels it `sbx.owner`).
objects() {
  local kind="$1" format
  case "$kind" in
    container) format='{{.ID}} {{.Label "sbx.owner"}}'; docker ps -a --filter label=sbx.owner --format "$format" ;;
    volume) format='{{.Name}} {{.Label "sbx.owner"}}'; docker volume ls --filter label=sbx.owner --format "$format" ;;
    network) format='{{.ID}} {{.Label "sbx.owner"}}'; docker network ls --filter label=sbx.owner --format "$format" ;;
    image) {
        docker image ls --format '{{.Repository}}:{{.Tag}} {{.Repository}}'
        docker images --filter label=sbx.owner --format '{{.ID}}' | sort -u | while read -r id; do
          echo "$id $(docker image inspect --format '{{index .Config.Labels "sbx.owner"}}' "$id" 2>/dev/null)"
        done
      } ;;
  esac | awk -v p="$prefix" 'index($2, p) == 1'
}

# Pids whose environment holds SBX_TEST_RUN=<run>, leaving out this script, its ancestors (the
# test runner that calls it carries the variable too), its own children, and vitest's workers.
# proc(5) stat: "pid (comm) state ppid ..."; comm may hold spaces ("npm exec vitest"), so the
# fields are counted after the last ')'.
parent_of() {
  local stat ppid
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }
  stat="${stat##*) }"
  read -r _ ppid _ <<<"$stat"
  echo "${ppid:-0}"
}
processes() {
  local ancestors=" " pid up cmd
  pid=$$
  while [[ "$pid" =~ ^[0-9]+$ && "$pid" -gt 1 ]]; do
    ancestors+="$pid "
    pid="$(parent_of "$pid")"
  done
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    [[ "$ancestors" == *" $pid "* ]] && continue
    { tr '\0' '\n' <"$dir/environ"; } 2>/dev/null | grep -qxF "SBX_TEST_RUN=$run" || continue
    # A descendant of this script (its subshells, tr, grep) is not a leftover.
    up="$(parent_of "$pid")"
    while [[ "$up" =~ ^[0-9]+$ && "$up" -gt 1 && "$up" != "$$" ]]; do up="$(parent_of "$up")"; done
    [[ "$up" == "$$" ]] && continue
    cmd="$({ tr '\0' ' ' <"$dir/cmdline"; } 2>/dev/null || true)"
    [[ -n "$cmd" ]] || continue
    # vitest's workers belong to the runner, which ends them itself.
    [[ "$cmd" == *node_modules/vitest/* || "$cmd" == *node_modules/tinypool/* ]] && continue
    echo "$pid ${cmd:0:200}"
  done
}

if ((remove)); then
  containers="$(objects container | awk '{print $1}')"
  [[ -z "$containers" ]] || docker rm -f -v $containers >/dev/null 2>&1 || true
  volumes="$(objects volume | awk '{print $1}')"
  [[ -z "$volumes" ]] || docker volume rm -f $volumes >/dev/null 2>&1 || true
  networks="$(objects network | awk '{print $1}')"
  [[ -z "$networks" ]] || docker network rm $networks >/dev/null 2>&1 || true
  images="$(objects image | awk '{print $1}')"
  [[ -z "$images" ]] || docker rmi -f $images >/dev/null 2>&1 || true
  pids="$(processes | awk '{print $1}')"
  [[ -z "$pids" ]] || kill -KILL $pids 2>/dev/null || true
fi

found=0
for kind in container volume network image; do
  while read -r id owner; do
    [[ -n "$id" ]] || continue
    echo "leftover $kind $id (sbx.owner=$owner)"
    found=1
  done < <(objects "$kind")
done
while read -r pid cmd; do
  [[ -n "$pid" ]] || continue
  echo "leftover process $pid: $cmd"
  found=1
done < <(processes)
if ((found)); then
  echo "test run $run left the objects and processes above behind" >&2
  exit 1
fi
echo "test run $run left nothing behind"
