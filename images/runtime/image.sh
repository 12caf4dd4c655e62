#!/usr/bin/env bash
# image.sh: the agent runtime (build-runtime.sh's directory) as an image, for clusters: the node
# relay's DaemonSet (deploy/kubernetes/kubernetes-driver/node-relay.yaml) installs it from this
# image onto every node, where the Kubernetes driver mounts it into each sandbox. The image holds
# the directory at /sbx-runtime and nothing else (FROM scratch: nothing to pull); the installer
# runs with the runtime's own static busybox. Tag: sbx-agent-runtime:<the runtime's hash>, or
# the argument. stdout: the tag.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
runtime="$(cat "$repo/dist/.sbx-runtime" 2>/dev/null)" || { echo "no agent runtime: npm run setup (build-runtime.sh)" >&2; exit 1; }
tag="${1:-sbx-agent-runtime:$(basename "$runtime")}"
if ! docker image inspect "$tag" >/dev/null 2>&1; then
  printf 'FROM scratch\nCOPY . /sbx-runtime/\n' | docker build -q -t "$tag" -f - "$runtime" >&2
fi
echo "$tag"
