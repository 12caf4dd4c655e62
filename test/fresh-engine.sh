#!/usr/bin/env bash
# The whole suite (`npm test`; with arguments, the test files they name) against a Docker engine with an empty data root, as on a fresh
# machine: a second dockerd beside the machine's own, with its own --data-root, --exec-root,
# --pidfile, unix socket, and a bridge of its own (created here, so the main engine's docker0 is
# not touched); --iptables=false so its rules cannot clash with the main engine's (the tests
# reach only loopback and their own containers). Set-up builds the sandbox image inside it
# (base image by debootstrap). DOCKER_HOST points every client at it: the docker CLI of the
# tests, set-up and images/build.sh, and the control plane (SBX_DOCKER_SOCKET's default).
# Afterwards, also on failure or interrupt, that dockerd is stopped by its pid and its
# directories, mounts and bridge are removed. Needs root. Output also goes to $SBX_FRESH_LOG.
set -euo pipefail
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log="${SBX_FRESH_LOG:-/tmp/sbx-fresh-engine.log}"
((EUID == 0)) || { echo "fresh-engine: needs root (it starts a dockerd)" >&2; exit 2; }

dir="$(mktemp -d /var/tmp/sbx-fresh.XXXXXX)"
bridge="sbxfresh$(od -An -tx1 -N2 /dev/urandom | tr -d ' \n')"
# A /24 no interface of this machine uses yet.
subnet=""
for n in $(seq 200 250); do
  ip -4 -o addr show | grep -q " 10\.213\.$n\." || { subnet="10.213.$n"; break; }
done
[[ -n "$subnet" ]] || { echo "fresh-engine: no free 10.213.x.0/24 for the bridge" >&2; exit 1; }
# And a /16 for the networks the tests create in it (its default address pool).
pool=""
for n in $(seq 214 250); do
  ip -4 -o addr show | grep -q " 10\.$n\." || { pool="10.$n.0.0/16"; break; }
done
[[ -n "$pool" ]] || { echo "fresh-engine: no free 10.x.0.0/16 for the address pool" >&2; exit 1; }
# With the main engine's FORWARD policy DROP and bridged traffic passing iptables (br_netfilter),
# traffic between containers on this engine's bridges would be dropped: the main engine's ACCEPT
# rules name its own bridges only, and this engine adds none (--iptables=false). A fresh machine
# has one engine that adds its own; here these rules stand in for them, for this engine's
# addresses only, and go with the cleanup.
forward_rules=("-s $subnet.0/24 -d $subnet.0/24 -j ACCEPT" "-s $pool -d $pool -j ACCEPT")
pid=""

cleanup() {
  local status=$?
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  # Whatever the engine left mounted under its roots (overlay layers, shm, netns).
  awk -v d="$dir" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf --one-file-system "$dir" 2>/dev/null || rm -rf "$dir" || true
  ip link del "$bridge" 2>/dev/null || true
  for rule in "${forward_rules[@]}"; do
    # shellcheck disable=SC2086 # each rule is a list of words
    while iptables -D FORWARD $rule 2>/dev/null; do :; done
  done
  echo "fresh-engine: stopped dockerd ${pid:-<none>}, removed $dir and bridge $bridge (exit $status)" | tee -a "$log" >&2
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip link add "$bridge" type bridge
ip addr add "$subnet.1/24" dev "$bridge"
ip link set "$bridge" up
if iptables -S FORWARD >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  for rule in "${forward_rules[@]}"; do iptables -I FORWARD 1 $rule; done
fi
mkdir -p "$dir/data" "$dir/exec"
# Its own config file (the main one may name hosts or a bridge); the runtimes are the machine's (runsc).
node -e '
  const fs = require("fs");
  let runtimes = {};
  try { runtimes = JSON.parse(fs.readFileSync("/etc/docker/daemon.json", "utf8")).runtimes ?? {}; } catch {}
  fs.writeFileSync(process.argv[1], JSON.stringify({ runtimes }, null, 2));
' "$dir/daemon.json"
sock="$dir/docker.sock"
setsid dockerd --config-file "$dir/daemon.json" --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
  -H "unix://$sock" --bridge "$bridge" --default-address-pool "base=$pool,size=24" --iptables=false --ip-masq=false >"$dir/dockerd.log" 2>&1 </dev/null &
pid=$!
export DOCKER_HOST="unix://$sock"
for _ in $(seq 1 300); do docker info >/dev/null 2>&1 && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
docker info >/dev/null 2>&1 || { tail -n 20 "$dir/dockerd.log" >&2; echo "fresh-engine: dockerd did not come up" >&2; exit 1; }
{
  echo "fresh-engine: dockerd $pid, data root $dir/data, bridge $bridge ($subnet.1/24), images: $(docker image ls -q | wc -l)"
  echo "fresh-engine: bridge network IPAM as the engine reports it: $(docker network inspect bridge -f '{{json .IPAM.Config}}')"
} | tee "$log" >&2
cd "$repo"
set +e
# Arguments, if any, go to vitest (e.g. one test file).
npm test -- "$@" 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
set -e
exit "$status"
