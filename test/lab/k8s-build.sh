#!/usr/bin/env bash
# k8s-build.sh: Kubernetes 1.20.2 server binaries for the lab cluster (k8s-lab.sh), built from
# Debian bookworm's `kubernetes` source package: no Kubernetes server binary is packaged for
# Debian or on npm, and nothing can be pulled here. About 14 minutes on 2 cores, once per
# machine: the binaries are cached outside the work tree, in SBX_K8S_CACHE
# (default /var/cache/sbx/k8s-1.20.2), and a second run with them present does nothing.
#
# Builds kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and kubectl with
# Debian's golang-go (offline: the tree's vendor/ directory), and `pause` (the pod sandbox's
# process, the tree's build/pause/linux/pause.c, static) into the cache. The source comes
# through a private deb-src list derived from the host's own Debian sources, so the host's apt
# configuration is never changed. Needs root (apt-get).
set -euo pipefail
cache="${SBX_K8S_CACHE:-/var/cache/sbx/k8s-1.20.2}"
binaries=(kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl pause)
say() { echo "k8s-build: $*" >&2; }

missing=0
for b in "${binaries[@]}"; do [[ -x $cache/$b ]] || missing=1; done
if ((!missing)); then say "binaries present in $cache"; exit 0; fi

t0=$EPOCHREALTIME
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends golang-go rsync jq gcc libc6-dev dpkg-dev >/dev/null
work=$(mktemp -d /var/tmp/sbx-k8s-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial"
# deb-src twins of the host's own sources (same mirrors, same keys), in a private list.
{ cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } | sed 's/^Types: *deb$/Types: deb-src/' >"$work/parts/src.sources"
{ grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } | sed 's/^deb /deb-src /' >"$work/parts/src.list"
apt_private=(-o APT::Sandbox::User=root -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/parts" -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache")
apt-get "${apt_private[@]}" update >/dev/null
# apt-get source unpacks the tree and applies Debian's patches.
(cd "$work" && apt-get "${apt_private[@]}" source kubernetes >/dev/null 2>&1)
src=$(find "$work" -maxdepth 1 -type d -name 'kubernetes-1.*' | head -1)
[[ -n $src ]] || { say "apt-get source kubernetes gave no source tree"; exit 1; }
printf "KUBE_GIT_VERSION='v1.20.2'\nKUBE_GIT_MAJOR='1'\nKUBE_GIT_MINOR='20'\nKUBE_GIT_TREE_STATE='clean'\n" >"$work/version.env"
say "building in $src (about 14 minutes on 2 cores)"
(
  cd "$src"
  mkdir -p .go/src/k8s.io && ln -sfn ../../.. .go/src/k8s.io/kubernetes
  HOME="$work/home" GOPATH="$src/.go" GOCACHE="$work/gocache" CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor \
    KUBE_GIT_VERSION_FILE="$work/version.env" KUBE_BUILD_PLATFORMS=linux/amd64 \
    nice -n 19 make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager cmd/kubelet cmd/kubectl" >"$work/make.log" 2>&1 \
    || { tail -30 "$work/make.log" >&2; exit 1; }
)
# Into a sibling directory first, then renamed: a cache is either whole or absent.
mkdir -p "$(dirname "$cache")"
rm -rf "$cache.partial" && mkdir "$cache.partial"
for b in kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl; do cp "$src/_output/bin/$b" "$cache.partial/"; done
gcc -Os -static -o "$cache.partial/pause" "$src/build/pause/linux/pause.c"
rm -rf "$cache" && mv "$cache.partial" "$cache"
say "built $(ls "$cache" | tr '\n' ' ')in $(awk "BEGIN{printf \"%.0f\", $EPOCHREALTIME-$t0}") s into $cache"
