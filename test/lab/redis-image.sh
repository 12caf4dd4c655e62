#!/usr/bin/env bash
# redis-image.sh: a Redis image for the lab, which can pull nothing: Debian's redis-server and
# redis-tools packages (and the libraries they need beyond the base image), fetched with the
# host's own apt configuration and unpacked onto the sandbox base image (images/base). No
# maintainer scripts run: Redis runs as root in the lab, as deploy/kubernetes's manifests run it.
# The tag is the packages' versions; an image already built is reused. stdout: the tag.
set -euo pipefail
base="${SBX_BASE_IMAGE:-sbx-base:bookworm}"
packages=(redis-server redis-tools libjemalloc2 liblzf1 libatomic1)
versions="$(apt-cache policy "${packages[@]}" | awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p $2 }' | tr -d '\n')"
tag="sbx-lab-redis:$(printf '%s %s' "$base" "$versions" | sha256sum | cut -c1-12)"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q "${packages[@]}" >&2)
mkdir "$work/root"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
# Only what Redis runs from, the binaries and libraries under /usr: not its docs, init scripts or
# systemd units (and a /lib of the packages' would replace the base image's /lib symlink).
rm -rf "$work/root/usr/share"
cat >"$work/Dockerfile" <<EOF
FROM $base
COPY root/usr/ /usr/
RUN redis-server --version
EOF
docker build -q -t "$tag" "$work" >&2
echo "$tag"
