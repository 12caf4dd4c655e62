#!/usr/bin/env bash
# Builds sbx-sandbox:<hash> (+ :latest) from the registry-free base image and
# the host's own node/npm (the agent is not in it: images/runtime/). The tag is a content hash of every
# input, so an up-to-date image is detected without staging or building.
# stdout carries only the tag (last line); progress goes to stderr.
set -euo pipefail

die() { echo "sbx-setup: $*" >&2; exit 1; }
trap '[[ $BASH_SUBSHELL -gt 0 ]] || echo "sbx-setup: images/build.sh failed at line $LINENO: $BASH_COMMAND" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
dockerfile="$here/sandbox/Dockerfile"

[[ -f "$dockerfile" ]] || die "$dockerfile is missing"
command -v node >/dev/null 2>&1 || die "node not found on PATH"
command -v npm >/dev/null 2>&1 || die "npm not found on PATH"

base_tag="$("$here/base/build-base.sh" | tail -n1)" || exit 1
base_id="$(docker image inspect -f '{{.Id}}' "$base_tag" 2>/dev/null)" \
  || die "base image $base_tag not found after build-base.sh"

node_bin="$(readlink -f "$(command -v node)")"
npm_dir="$(readlink -f "$(npm root -g)/npm")"
[[ -f "$npm_dir/bin/npm-cli.js" && -f "$npm_dir/bin/npx-cli.js" ]] \
  || die "npm installation not found at $npm_dir (expected bin/npm-cli.js and bin/npx-cli.js)"

sha() { sha256sum "$1" | cut -d' ' -f1; }
node_sha="$(sha "$node_bin")"
npm_version="$(node -p 'require(process.argv[1]).version' "$npm_dir/package.json")"
dockerfile_sha="$(sha "$dockerfile")"

hash="$(printf '%s\n' "$base_id" "$node_sha" "$npm_version" "$dockerfile_sha" \
  | sha256sum | cut -c1-12)"
tag="sbx-sandbox:$hash"

ensure_latest() {
  local want have
  want="$(docker image inspect -f '{{.Id}}' "$tag")"
  have="$(docker image inspect -f '{{.Id}}' sbx-sandbox:latest 2>/dev/null || true)"
  [[ "$want" == "$have" ]] || docker tag "$tag" sbx-sandbox:latest
}

if docker image inspect "$tag" >/dev/null 2>&1; then
  ensure_latest
  echo "$tag"
  exit 0
fi

# Staged copy instead of building from the repo root: the context must hold
# files from outside the repo (node, npm) and nothing else.
ctx="$(mktemp -d "${TMPDIR:-/var/tmp}/sbx-sandbox-ctx.XXXXXX")"
trap 'rm -rf --one-file-system "$ctx"' EXIT
cp "$node_bin" "$ctx/node"
cp -a "$npm_dir" "$ctx/npm"
cp "$dockerfile" "$ctx/Dockerfile"
# The legacy builder has no COPY --chmod, so modes are fixed in the context.
chmod 0755 "$ctx/node"

# Without the buildx plugin the modern CLI refuses BuildKit builds; the legacy
# builder is enough for this Dockerfile.
build_env=()
docker buildx version >/dev/null 2>&1 || build_env=(DOCKER_BUILDKIT=0)

echo "sbx-setup: building $tag (node $("$node_bin" --version), npm $npm_version)" >&2
if ! env "${build_env[@]}" docker build \
    --build-arg "BASE_IMAGE=$base_tag" \
    --label sbx.image=sandbox \
    -t "$tag" "$ctx" >&2; then
  die "docker build of $tag failed (see output above)"
fi

# A host node linked against libraries the base lacks would only fail at
# lease time; catch it here and keep the broken tag from being reused.
if ! out="$(docker run --rm --network none --entrypoint /usr/local/bin/node "$tag" --version 2>&1)"; then
  docker rmi "$tag" >/dev/null 2>&1 || true
  die "node does not run inside $tag: $(tail -n1 <<<"$out")"
fi

ensure_latest
# Keeps the four newest builds (other checkouts on this engine may lease theirs);
# plain rmi (no -f) only untags and refuses images a container still uses.
docker image ls --format '{{.Repository}}:{{.Tag}}' sbx-sandbox \
  | grep -E '^sbx-sandbox:[0-9a-f]{12}$' | grep -vxF "$tag" | tail -n +4 \
  | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$tag"
