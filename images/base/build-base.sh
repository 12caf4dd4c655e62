#!/usr/bin/env bash
# Builds the sandbox base image without any registry: debootstrap a minimal
# Debian rootfs from the mirror this machine already uses, then `docker import`.
# stdout carries only the resulting tag (last line); progress goes to stderr so
# callers can do tag=$(build-base.sh | tail -n1).
set -euo pipefail

die() { echo "sbx-setup: $*" >&2; exit 1; }
trap '[[ $BASH_SUBSHELL -gt 0 ]] || echo "sbx-setup: build-base.sh failed at line $LINENO: $BASH_COMMAND" >&2' ERR

SUITE=bookworm
# passwd is listed explicitly so the sandbox Dockerfile can rely on
# useradd/groupadd even if minbase's notion of "required" ever changes.
# Full python3 (python3-minimal has no json, sqlite3, http.server, ...), venv
# and pip; python3-wheel-whl puts the wheel wheel beside the pip and
# setuptools ones in /usr/share/python-wheels, so a venv can build a local
# project with no index (pip install --no-index --find-links ...).
PACKAGES=(bash coreutils procps git python3 python3-venv python3-pip python3-wheel-whl
          ca-certificates tini ripgrep curl findutils grep sed tar gzip less file iproute2 passwd)

self="$(readlink -f "${BASH_SOURCE[0]}")"
# The script text is part of the hash so any change to how the rootfs is made
# (cleanup, import options) yields a new tag instead of silently reusing an old one.
hash="$( { printf '%s\n' "${PACKAGES[*]}" "$SUITE"; cat "$self"; } | sha256sum | cut -c1-12)"
tag="sbx-base:${SUITE}-${hash}"
alias_tag="sbx-base:${SUITE}"

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "docker engine is not reachable (is dockerd running?)"

ensure_alias() {
  local want have
  want="$(docker image inspect -f '{{.Id}}' "$tag")"
  have="$(docker image inspect -f '{{.Id}}' "$alias_tag" 2>/dev/null || true)"
  [[ "$want" == "$have" ]] || docker tag "$tag" "$alias_tag"
}

if docker image inspect "$tag" >/dev/null 2>&1; then
  ensure_alias
  echo "$tag"
  exit 0
fi

# Mirror URI comes from the host's apt configuration at run time so that no
# mirror host is baked into the repository; SBX_DEBIAN_MIRROR overrides it.
find_mirror() {
  local uri="" f
  local -a deb822=() legacy=()
  for f in /etc/apt/sources.list.d/*.sources; do [[ -f "$f" ]] && deb822+=("$f"); done
  if ((${#deb822[@]})); then
    uri="$(awk -v suite="$SUITE" '
      function flush() {
        if (!found && enabled != "no" && uri != "" &&
            (" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ")) { print uri; found = 1 }
        types = suites = uri = enabled = ""
      }
      FNR == 1 && NR > 1 { flush() }
      /^#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/ { next }
      {
        i = index($0, ":"); if (!i) next
        key = tolower(substr($0, 1, i - 1)); val = substr($0, i + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", val)
        if (key == "types") types = val
        else if (key == "suites") suites = val
        else if (key == "enabled") enabled = tolower(val)
        else if (key == "uris") { split(val, a, /[ \t]+/); uri = a[1] }
      }
      END { flush() }' "${deb822[@]}")"
  fi
  if [[ -z "$uri" ]]; then
    [[ -f /etc/apt/sources.list ]] && legacy+=(/etc/apt/sources.list)
    for f in /etc/apt/sources.list.d/*.list; do [[ -f "$f" ]] && legacy+=("$f"); done
    if ((${#legacy[@]})); then
      uri="$(awk -v suite="$SUITE" '
        $1 == "deb" {
          i = 2
          if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          if ($(i + 1) == suite) { print $i; exit }
        }' "${legacy[@]}")"
    fi
  fi
  printf '%s' "${uri%/}"
}

[[ $EUID -eq 0 ]] || die "building $tag needs root (debootstrap); run deploy/local/setup.sh as root"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install debootstrap)"

mirror="${SBX_DEBIAN_MIRROR:-$(find_mirror)}"
[[ -n "$mirror" ]] || die "no apt source for suite '$SUITE' found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list (set SBX_DEBIAN_MIRROR)"

# /var/tmp rather than /tmp: the rootfs needs device nodes and real disk space,
# and /tmp is often a small nodev tmpfs.
rootfs="$(mktemp -d "${TMPDIR:-/var/tmp}/sbx-base.XXXXXX")"
log="$(mktemp "${TMPDIR:-/var/tmp}/sbx-base-debootstrap.XXXXXX.log")"
cleanup() {
  # A failed debootstrap can leave proc/sys mounted inside the target; unmount
  # them first and never let rm cross into another filesystem.
  local m
  while read -r m; do umount -l "$m" 2>/dev/null || true; done \
    < <(awk -v r="$rootfs/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r)
  rm -rf --one-file-system "$rootfs"
}
trap cleanup EXIT

echo "sbx-setup: debootstrap $SUITE (minbase) from $mirror -> $tag (log: $log)" >&2
include="$(IFS=,; echo "${PACKAGES[*]}")"
if ! debootstrap --variant=minbase --include="$include" "$SUITE" "$rootfs" "$mirror" >"$log" 2>&1; then
  reason="$(grep -E '^(E|W): ' "$log" | tail -n1 || true)"
  [[ -n "$reason" ]] || reason="$(tail -n1 "$log")"
  die "debootstrap failed: ${reason} (full log: $log)"
fi

# Everything below only shrinks the image or strips host-specific leftovers;
# apt can re-fetch lists inside a container if anyone ever needs it.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
       "$rootfs"/var/lib/dpkg/*-old "$rootfs"/var/log/* "$rootfs"/debootstrap \
       "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/lintian
# Message translations are ~45 MB and sandboxed tools are driven in English.
find "$rootfs"/usr/share/locale -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + 2>/dev/null || true
find "$rootfs"/usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find "$rootfs"/usr/share/doc -mindepth 1 -type d -empty -delete 2>/dev/null || true
# Docker bind-mounts its own resolv.conf/hosts/hostname; the copies debootstrap
# took from the host would otherwise leak host details into the image.
for f in etc/resolv.conf etc/hostname etc/machine-id; do
  if [[ -e "$rootfs/$f" && ! -L "$rootfs/$f" ]]; then : >"$rootfs/$f"; fi
done

# --numeric-owner: ownership must be the rootfs's uids, not whatever those
# names map to on the host.
if ! tar --numeric-owner -C "$rootfs" -cf - . \
    | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL sbx.image=base sbx.base.suite=$SUITE sbx.base.hash=$hash" \
        --message "debootstrap --variant=minbase $SUITE" \
        - "$tag" >&2; then
  die "docker import of the $SUITE rootfs failed"
fi
rm -f "$log"
ensure_alias
# Keeps the four newest bases: other checkouts on this engine may build from
# an older package list, and removing their tag would make each of them
# debootstrap it again (and then remove this one). Plain rmi (no -f) only
# untags and refuses anything a container still uses.
docker image ls --format '{{.Repository}}:{{.Tag}}' sbx-base \
  | grep -E "^sbx-base:${SUITE}-[0-9a-f]{12}\$" | grep -vxF "$tag" | tail -n +4 \
  | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$tag"
