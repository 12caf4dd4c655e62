#!/usr/bin/env bash
# kubernetes-suite.sh: the Kubernetes driver's suite on the lab cluster, from nothing to nothing.
# Builds the Kubernetes binaries once per machine (k8s-build.sh, cached), brings the 3-node lab
# up (k8s-lab.sh), pushes the sandbox image, a Redis image (redis-image.sh) and the agent runtime's image into the lab's registry, runs the `kubernetes`
# vitest project (test/kubernetes/) inside the lab's hub network namespace (where the API server
# and the registry listen), and takes the lab down, also when a step failed, checking that none
# of it is left. Extra arguments go to vitest (e.g. one test file); `kubernetes-suite.sh bench`
# runs the Kubernetes-against-Docker benchmark (bench/kubernetes.ts) there instead. Needs root,
# and deploy/local/setup.sh run before (Docker engine, Redis, the sandbox image and agent runtime).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# A lab of this run's own (namespace names, cgroups, directory): two checkouts may test at once.
export SBX_LAB_NAME="${SBX_LAB_NAME:-k$(od -An -tx1 -N2 /dev/urandom | tr -d ' \n')}"
lab="${SBX_LAB_DIR:-/var/tmp/$SBX_LAB_NAME-lab}"
export SBX_TEST_RUN="${SBX_TEST_RUN:-$(od -An -tx1 -N4 /dev/urandom | tr -d ' \n')}"

bash "$here/k8s-build.sh"
status=0
down() { bash "$here/k8s-lab.sh" down || status=1; }
trap down EXIT
bash "$here/k8s-lab.sh" up
# The sandbox image, and what deploy.test.ts runs as Pods: Redis (from Debian's packages) and the
# agent runtime's image, which the node relay's DaemonSet installs on each node.
redis_image="$(bash "$here/redis-image.sh")"
runtime_image="$(bash "$repo/images/runtime/image.sh")"
bash "$here/k8s-lab.sh" push "$(cat "$repo/dist/.sbx-image")" "$redis_image" "$runtime_image"
# shellcheck disable=SC1091
source "$lab/env"
export SBX_LAB_REDIS_IMAGE="$SBX_LAB_REGISTRY/$redis_image" SBX_LAB_RUNTIME_IMAGE="$SBX_LAB_REGISTRY/$runtime_image"
# Node's own setting for a private CA, read at start: the tests' control planes trust the lab's.
export NODE_EXTRA_CA_CERTS="$SBX_LAB_TLS_CA"
if [[ ${1:-} == bench ]]; then
  (cd "$repo" && nsenter --net="$SBX_LAB_HUB" node dist/bench/kubernetes.js) || status=$?
else
  (cd "$repo" && nsenter --net="$SBX_LAB_HUB" npx vitest run --project kubernetes "$@") || status=$?
fi
trap - EXIT
down
bash "$repo/test/leftovers.sh" "$SBX_TEST_RUN" || status=1
exit "$status"
