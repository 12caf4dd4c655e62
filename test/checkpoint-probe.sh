#!/usr/bin/env bash
# Memory-checkpoint probe (`npm run build` first): a private experimental dockerd: own data root, exec root, pidfile,
# socket; no bridge, no iptables. Runs `docker checkpoint create` on a busybox container and
# sbx's own checkpointSupport / checkpointSandbox (dist/) against it. Stopped by its pid and removed afterwards, also on failure.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
((EUID == 0)) || { echo "checkpoint-probe: needs root (it starts a dockerd)" >&2; exit 2; }
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
dir="$(mktemp -d /var/tmp/sbx-pause-exp.XXXXXX)"
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    DOCKER_HOST="unix://$dir/docker.sock" docker rm -f sbx-sbx_checkpointprobe >/dev/null 2>&1
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  awk -v d="$dir" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf --one-file-system "$dir" 2>/dev/null || rm -rf "$dir"
  echo "probe: stopped dockerd ${pid:-<none>}, removed $dir"
}
trap cleanup EXIT
echo '{}' > "$dir/daemon.json"
setsid dockerd --experimental --config-file "$dir/daemon.json" --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
  -H "unix://$dir/docker.sock" --bridge none --iptables=false --ip-masq=false >"$dir/dockerd.log" 2>&1 </dev/null &
pid=$!
export DOCKER_HOST="unix://$dir/docker.sock"
for _ in $(seq 1 150); do docker info >/dev/null 2>&1 && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
docker info --format 'probe: engine {{.ServerVersion}} ExperimentalBuild={{.ExperimentalBuild}}' || { tail -20 "$dir/dockerd.log"; exit 1; }
mkdir -p "$dir/rootfs/bin" && cp /bin/busybox "$dir/rootfs/bin/busybox" && ln -s busybox "$dir/rootfs/bin/sh"
tar -C "$dir/rootfs" -c . | docker import - sbx-pause-probe:busybox >/dev/null
docker run -d --name sbx-sbx_checkpointprobe --network none sbx-pause-probe:busybox /bin/busybox sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c; /bin/busybox sleep 0.1; done' >/dev/null
echo "probe: docker checkpoint create (CLI):"; docker checkpoint create --leave-running sbx-sbx_checkpointprobe cp1 2>&1 | tail -3
cd "$repo" && SOCK="$dir/docker.sock" node --input-type=module -e '
import Docker from "dockerode";
import { checkpointSupport, checkpointSandbox } from "./dist/control-plane/runtime/docker-freezer.js";
const docker = new Docker({ socketPath: process.env.SOCK });
console.log("probe: checkpointSupport =", JSON.stringify(await checkpointSupport(docker, true)));
try { await checkpointSandbox(docker, "sbx_checkpointprobe", "cp2"); console.log("probe: checkpointSandbox ok"); }
catch (e) { console.log("probe: checkpointSandbox threw", e.code, e.message.slice(0, 300)); }
'
