#!/usr/bin/env bash
# Idempotent local bootstrap for sbx: host packages, gVisor runtime, Docker
# engine, a private Redis, npm deps, build, sandbox image. Every step checks
# before acting so a second run changes nothing and takes seconds; it runs in
# front of npm test/start/demo/bench.
set -euo pipefail

t0="${EPOCHREALTIME}"
die() { echo "sbx-setup: $*" >&2; exit 1; }
warn() { echo "sbx-setup: warning: $*" >&2; }
note() { echo "sbx-setup: $*" >&2; }
trap '[[ $BASH_SUBSHELL -gt 0 ]] || echo "sbx-setup: setup.sh failed at line $LINENO: $BASH_COMMAND" >&2' ERR

# npm scripts and sudo can hand us a PATH without the sbin dirs where dockerd,
# debootstrap and iptables live.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# The engine and the Redis started here serve the machine, not one test run: they must not carry
# the run id that test/leftovers.sh reaps by (a fresh CI machine's dockerd was SIGKILLed by the
# suite's own teardown when it did).
unset SBX_TEST_RUN
data="${SBX_DATA_DIR:-/var/lib/sbx}"
is_root=0; [[ $EUID -eq 0 ]] && is_root=1

# ---------------------------------------------------------------- a. privileges
mkdir -p "$data/log" 2>/dev/null \
  || die "cannot create $data (run as root or set SBX_DATA_DIR to a writable directory)"
# Serialise concurrent runs (e.g. two npm scripts started together). fd 9 is
# closed for long-lived daemons below so they do not hold the lock forever.
{ : >>"$data/.setup.lock"; } 2>/dev/null \
  || die "cannot write $data (run as root or set SBX_DATA_DIR to a writable directory)"
exec 9>>"$data/.setup.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
  note "another setup.sh is running; waiting for it"
  flock 9
fi

# ---------------------------------------------------------------- b. packages
apt_updated=0
apt_err=""
# Sets apt_err to a one-line reason and returns 1 on failure.
apt_install() {
  local pkg="$1" out
  if ((!is_root)); then apt_err="not running as root"; return 1; fi
  command -v apt-get >/dev/null 2>&1 || { apt_err="apt-get not available"; return 1; }
  if ((!apt_updated)); then
    if ! out="$(apt-get update 2>&1)"; then
      apt_err="apt-get update failed: $(first_error "$out")"; return 1
    fi
    apt_updated=1
  fi
  note "installing $pkg"
  if ! out="$(DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$pkg" 2>&1)"; then
    apt_err="$(first_error "$out")"; return 1
  fi
}
first_error() {
  local e
  e="$(grep -E '^E: ' <<<"$1" | head -n1 | sed 's/^E: //' || true)"
  [[ -n "$e" ]] || e="$(grep -v '^[[:space:]]*$' <<<"$1" | tail -n1 || true)"
  printf '%s' "${e:-unknown error}"
}
require() { # command package
  command -v "$1" >/dev/null 2>&1 && return 0
  apt_install "$2" || die "cannot install $2: $apt_err"
  command -v "$1" >/dev/null 2>&1 || die "cannot install $2: '$1' still not found after install"
}

require dockerd docker.io
require docker docker.io
require redis-server redis-server
require redis-cli redis-tools
require debootstrap debootstrap
require iptables iptables
# The agent runtime mounted into every sandbox (images/runtime/build-runtime.sh): a static init
# and busybox, and patchelf to point the host's node at its own copy of its libraries.
require patchelf patchelf
[[ -x /usr/bin/tini-static ]] || apt_install tini || die "cannot install tini: $apt_err"
[[ -x /bin/busybox ]] && /bin/busybox --list >/dev/null 2>&1 && ! ldd /bin/busybox >/dev/null 2>&1 \
  || apt_install busybox-static || die "cannot install busybox-static: $apt_err"
# The file watch's inotify helper and the exec launcher are built static (images/runtime/sbx-inotify.c, sbx-exec.c): gcc and libc.a.
require gcc gcc
[[ -f /usr/lib/x86_64-linux-gnu/libc.a || -f /usr/lib/aarch64-linux-gnu/libc.a ]] || apt_install libc6-dev || die "cannot install libc6-dev: $apt_err"
# A local image registry for the registry-pull tests (test/images.test.ts).
require docker-registry docker-registry
# Headless browser for the admin console's end-to-end tests (test/console.test.ts).
require chromium chromium
if [[ ! -x /usr/bin/runsc ]]; then
  if apt-cache show runsc >/dev/null 2>&1; then
    apt_install runsc || warn "cannot install runsc: $apt_err; sandboxes will run without gVisor"
  else
    warn "package runsc not available; sandboxes will run without gVisor"
  fi
fi

docker_up() { docker info >/dev/null 2>&1; }
docker_runtimes() { docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null || true; }
dockerd_pid() { pidof dockerd 2>/dev/null | awk '{print $1}' || true; }

# ---------------------------------------------------------------- c. gVisor
if [[ -x /usr/bin/runsc ]]; then
  daemon_json=/etc/docker/daemon.json
  # Merge rather than overwrite: the host may already carry its own daemon
  # settings (mirrors, storage, log options) that are not ours to drop.
  if ((is_root)); then
    mkdir -p /etc/docker
    merge_out="$(node - "$daemon_json" <<'EOF' 2>&1
const fs = require('fs');
const file = process.argv[2];
let cfg = {};
if (fs.existsSync(file)) {
  const text = fs.readFileSync(file, 'utf8');
  if (text.trim() !== '') {
    try { cfg = JSON.parse(text); } catch (e) { console.log(`invalid JSON in ${file}: ${e.message}`); process.exit(2); }
  }
}
if (cfg === null || typeof cfg !== 'object' || Array.isArray(cfg)) { console.log(`${file} is not a JSON object`); process.exit(2); }
// --host-uds=open: the agent connects to the Redis socket bind-mounted from the host.
const want = { path: '/usr/bin/runsc', runtimeArgs: ['--platform=ptrace', '--network=host', '--host-uds=open'] };
cfg.runtimes = cfg.runtimes && typeof cfg.runtimes === 'object' ? cfg.runtimes : {};
if (JSON.stringify(cfg.runtimes.runsc) === JSON.stringify(want)) { console.log('unchanged'); process.exit(0); }
cfg.runtimes.runsc = want;
const tmp = `${file}.sbx-tmp`;
fs.writeFileSync(tmp, JSON.stringify(cfg, null, 2) + '\n');
fs.renameSync(tmp, file);
console.log('changed');
EOF
)" || die "cannot register runsc in /etc/docker/daemon.json: $merge_out"
    if [[ "$merge_out" == changed ]]; then
      note "registered runtime runsc in $daemon_json"
      # A running dockerd rereads its runtimes on SIGHUP (dockerd(8), "Configuration reload").
      pid="$(dockerd_pid)"
      if [[ -n "$pid" ]]; then kill -HUP "$pid"; sleep 1; fi
    fi
  fi
  # Checked against the live daemon rather than "did we edit the file" so a
  # previous run that edited it but never reloaded still gets fixed.
  if docker_up && [[ " $(docker_runtimes) " != *" runsc "* ]]; then
    pid="$(dockerd_pid)"
    if ((is_root)) && [[ -n "$pid" ]]; then
      note "reloading dockerd (pid $pid) to pick up the runsc runtime"
      kill -HUP "$pid"
      for _ in $(seq 1 50); do
        [[ " $(docker_runtimes) " == *" runsc "* ]] && break
        sleep 0.2
      done
      [[ " $(docker_runtimes) " == *" runsc "* ]] \
        || warn "dockerd did not register runtime runsc after reload (see its log); sandboxes will run without gVisor"
    else
      warn "runtime runsc is not registered with the running dockerd and it cannot be reloaded from here"
    fi
  fi
fi

# ---------------------------------------------------------------- d. Docker
if ! docker_up; then
  if ((!is_root)); then
    reason="$(docker info 2>&1 >/dev/null | grep -v '^[[:space:]]*$' | tail -n1 || true)"
    die "docker engine is not reachable as $(id -un) and starting dockerd needs root: ${reason:-docker info failed}"
  fi
  started_dockerd=0
  if [[ -n "$(dockerd_pid)" ]]; then
    note "dockerd is running but not answering yet; waiting"
  else
    started_dockerd=1
    note "starting dockerd (log: $data/log/dockerd.log)"
    # setsid: keep dockerd alive when the npm script that ran us is interrupted.
    nohup setsid dockerd </dev/null >>"$data/log/dockerd.log" 2>&1 9>&- &
  fi
  for _ in $(seq 1 300); do
    docker_up && break
    sleep 0.2
  done
  if ! docker_up; then
    if ((started_dockerd)); then
      tail_log="$(tail -n 5 "$data/log/dockerd.log" 2>/dev/null | tr '\n' ' ' || true)"
      die "docker engine did not come up within 60s; last dockerd log lines: ${tail_log:-<none>}"
    fi
    reason="$(docker info 2>&1 >/dev/null | grep -v '^[[:space:]]*$' | tail -n1 || true)"
    die "dockerd (pid $(dockerd_pid)) is running but docker info still fails after 60s: ${reason:-unknown error}"
  fi
fi
docker_version="$(docker version --format '{{.Server.Version}}' 2>/dev/null || echo unknown)"

# ---------------------------------------------------------------- e. Redis
# A private instance instead of the distro service (deploy/local/redis.sh).
redis_version="$(SBX_DATA_DIR="$data" bash "$repo/deploy/local/redis.sh")" || die "deploy/local/redis.sh failed (its reason is above)"

# ---------------------------------------------------------------- f. npm deps
cd "$repo"
lock_sha="$(sha256sum package-lock.json | cut -d' ' -f1)"
stamp=node_modules/.sbx-lock-sha256
if [[ ! -d node_modules || "$(cat "$stamp" 2>/dev/null || true)" != "$lock_sha" ]]; then
  note "installing npm dependencies (npm ci)"
  npm_out="$(npm ci --no-audit --no-fund 2>&1)" || { printf '%s\n' "$npm_out" >&2; die "npm ci failed (see output above)"; }
  grep -E '^(added|removed|changed|up to date)' <<<"$npm_out" >&2 || true
  printf '%s\n' "$lock_sha" >"$stamp"
fi

# ---------------------------------------------------------------- g. build
build_stamp=dist/.sbx-build-stamp
build_inputs=()
for p in contract control-plane sandbox-agent cli console demo bench test images/agent-bundle.mjs tsconfig.json package.json; do
  [[ -e "$p" ]] && build_inputs+=("$p")
done
# Directories are included on purpose: deleting or renaming a source file
# only bumps its directory's mtime.
if [[ ! -f "$build_stamp" ]] || [[ -n "$(find "${build_inputs[@]}" -newer "$build_stamp" -print -quit)" ]]; then
  note "building (npm run build)"
  # Stamp from before the build so edits made while tsc runs still count as newer.
  pre_stamp="$(mktemp "${TMPDIR:-/tmp}/sbx-build-stamp.XXXXXX")"
  npm run build >&2 || { rm -f "$pre_stamp"; die "npm run build failed (see output above)"; }
  mkdir -p dist
  mv "$pre_stamp" "$build_stamp"
  chmod 0644 "$build_stamp"
fi

# ---------------------------------------------------------------- h. agent runtime and image
# Every sandbox gets the agent from this directory (read-only at /opt/sbx), whatever its image.
runtime_dir="$(bash "$repo/images/runtime/build-runtime.sh" | tail -n1)" || die "images/runtime/build-runtime.sh failed (its reason is above)"
image_tag="$(bash "$repo/images/build.sh" | tail -n1)" || die "images/build.sh failed (its reason is above)"
# The control plane of this checkout leases this image by default (not a shared :latest that
# another checkout may have rebuilt with a different agent).
[[ "$(cat dist/.sbx-image 2>/dev/null || true)" == "$image_tag" ]] || printf '%s\n' "$image_tag" >dist/.sbx-image

# ---------------------------------------------------------------- i. summary
elapsed="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
echo "sbx-setup: ready (docker $docker_version, redis ${redis_version:-unknown}, image $image_tag, agent runtime ${runtime_dir##*/}) in ${elapsed}s"
