#!/usr/bin/env bash
# Builds the sbx agent runtime: the directory every sandbox gets read-only at /opt/sbx, whatever
# its image holds (no Node, no shell, musl or no libc at all). Self-contained: the host's node
# with its own glibc loader and libraries (patchelf points node at them, so neither the image's
# libraries nor an LD_LIBRARY_PATH of the image are ever loaded), a static tini as init, a static
# busybox, GNU tar with its libraries for file transfers, and the agent bundle. Nothing of it is
# written into an image or its layers.
#
# Output: dist/sbx-runtime/<hash>/ (hash: the first 12 hex digits of the sha256 of every input),
# and dist/.sbx-runtime holding that directory's absolute path; the control plane reads it
# (SBX_AGENT_RUNTIME overrides). An up-to-date directory is kept; older ones are pruned down to
# the three newest (sandboxes still running keep theirs: a bind mount holds its directory).
# stdout carries only the directory (last line); progress goes to stderr.
set -euo pipefail
trap '[[ $BASH_SUBSHELL -gt 0 ]] || echo "sbx-setup: images/runtime/build-runtime.sh failed at line $LINENO: $BASH_COMMAND" >&2' ERR

die() { echo "sbx-setup: $*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bundle="$repo/dist/agent/sbx-agent-main.cjs"
boot="$repo/dist/agent/sbx-agent.cjs"
fetch_proxy="$repo/dist/agent/sbx-fetch-proxy.cjs"
fetch_proxy_loader="$repo/dist/agent/sbx-fetch-proxy-loader.cjs"
out_root="$repo/dist/sbx-runtime"

for f in "$bundle" "$boot" "$fetch_proxy" "$fetch_proxy_loader"; do [[ -f "$f" ]] || die "agent bundle $f is missing; run 'npm run build' first"; done
# The terminals' pty (node-pty, a native addon built against this node): built here when npm did
# not run its install script.
pty_dir="$repo/node_modules/node-pty"
pty_node="$pty_dir/build/Release/pty.node"
[[ -d "$pty_dir" ]] || die "node-pty is missing from node_modules; run 'npm ci'"
if [[ ! -f "$pty_node" ]]; then
  echo "sbx-setup: building node-pty" >&2
  node_prefix="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
  (cd "$pty_dir" && node "$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js" rebuild --nodedir="$node_prefix" >&2) || die "cannot build node-pty (needs make and a C++ compiler)"
fi
node_bin="$(readlink -f "$(command -v node)")"
tar_bin="$(readlink -f "$(command -v tar)")"
tini_bin=/usr/bin/tini-static
busybox_bin=/bin/busybox
# The file watch's inotify helper (sbx-inotify.c), built static here: it runs in any image.
inotify_src="$here/sbx-inotify.c"
# The launcher of exec calls (sbx-exec.c), static for the same reason.
exec_src="$here/sbx-exec.c"
command -v gcc >/dev/null 2>&1 || die "gcc is missing (package gcc, with libc6-dev for the static C library)"
for f in "$tini_bin" "$busybox_bin"; do [[ -x "$f" ]] || die "$f is missing (packages tini, busybox-static)"; done
command -v patchelf >/dev/null 2>&1 || die "patchelf is missing (package patchelf)"

sha() { sha256sum "$1" | cut -d' ' -f1; }
# The libraries a binary loads (ldd's resolved paths, the loader included), one a line.
libs_of() { ldd "$1" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'; }
inputs="$( {
  for f in "$node_bin" "$tar_bin" "$tini_bin" "$busybox_bin" "$inotify_src" "$exec_src" "$bundle" "$boot" "$fetch_proxy" "$fetch_proxy_loader" "$pty_node" "$pty_dir/package.json" "${BASH_SOURCE[0]}" $(libs_of "$node_bin") $(libs_of "$tar_bin"); do
    printf '%s %s\n' "$(sha "$(readlink -f "$f")")" "$f"
  done
} | sort -u)"
hash="$(sha256sum <<<"$inputs" | cut -c1-12)"
dir="$out_root/$hash"

if [[ ! -f "$dir/.complete" ]]; then
  echo "sbx-setup: building agent runtime $hash (node $("$node_bin" --version))" >&2
  mkdir -p "$out_root"
  stage="$(mktemp -d "$out_root/.stage.XXXXXX")"
  trap 'rm -rf --one-file-system "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/lib" "$stage/tools" "$stage/agent"
  for f in $(libs_of "$node_bin") $(libs_of "$tar_bin"); do cp -L "$f" "$stage/lib/"; done
  loader="$(ldd "$node_bin" | awk '/^\t\/[^ ]+ \(/ { print $1 }')"
  loader_name="$(basename "$loader")"
  [[ -f "$stage/lib/$loader_name" ]] || die "node's loader $loader was not staged"
  cp "$node_bin" "$stage/bin/node"
  cp "$tar_bin" "$stage/tools/tar"
  # DT_RPATH (--force-rpath), not DT_RUNPATH: an LD_LIBRARY_PATH the image sets cannot override it.
  for b in "$stage/bin/node" "$stage/tools/tar"; do
    patchelf --set-interpreter "/opt/sbx/lib/$loader_name" --force-rpath --set-rpath /opt/sbx/lib "$b"
  done
  cp "$tini_bin" "$stage/bin/tini"
  cp "$busybox_bin" "$stage/bin/busybox"
  gcc -static -O2 -Wall -Werror -o "$stage/bin/sbx-inotify" "$inotify_src" || die "could not build $inotify_src (gcc -static needs libc6-dev)"
  gcc -static -O2 -Wall -Werror -o "$stage/bin/sbx-exec" "$exec_src" || die "could not build $exec_src (gcc -static needs libc6-dev)"
  # The transfer scripts' utilities (control-plane/runtime/transfer-scripts): busybox applets.
  for applet in sh mv mkdir rm rmdir cat ls chmod mktemp env readlink test '[' printf echo find stat dirname basename; do
    ln -s ../bin/busybox "$stage/tools/$applet"
  done
  cp "$bundle" "$stage/agent/sbx-agent-main.cjs"
  cp "$boot" "$stage/agent/sbx-agent.cjs"
  cp "$fetch_proxy" "$stage/agent/sbx-fetch-proxy.cjs"
  cp "$fetch_proxy_loader" "$stage/agent/sbx-fetch-proxy-loader.cjs"
  # node-pty beside the bundle (require('node-pty') from agent/ finds it): its JS and its addon.
  mkdir -p "$stage/agent/node_modules/node-pty/build/Release"
  cp "$pty_dir/package.json" "$stage/agent/node_modules/node-pty/"
  cp -r "$pty_dir/lib" "$stage/agent/node_modules/node-pty/"
  cp "$pty_node" "$stage/agent/node_modules/node-pty/build/Release/"
  chmod -R u=rwX,go=rX "$stage"
  # A node that cannot start with its staged libraries fails here, not at lease time (through the
  # staged loader: the interpreter path /opt/sbx/lib exists only inside sandboxes).
  "$stage/lib/$loader_name" --library-path "$stage/lib" "$stage/bin/node" -e 'process.exit(0)' \
    || die "the staged node does not start with its staged libraries"
  # The agent's V8 code cache (sandbox-agent/boot.ts), made by the node that will use it, with the
  # agent's flags: V8 rejects a cache made under other flags (AGENT_NODE_FLAGS, contract/agent-runtime.ts).
  agent_flags=(--expose-gc --max-semi-space-size=4)
  "$stage/lib/$loader_name" --library-path "$stage/lib" "$stage/bin/node" "${agent_flags[@]}" "$stage/agent/sbx-agent.cjs" --write-code-cache \
    || die "could not write the agent's code cache"
  chmod go=r "$stage/agent/sbx-agent-main.v8cache"
  printf '%s\n' "$inputs" >"$stage/INPUTS"
  touch "$stage/.complete"
  rm -rf --one-file-system "$dir"
  mv "$stage" "$dir"
  trap - EXIT
fi

printf '%s\n' "$dir" >"$repo/dist/.sbx-runtime.tmp" && mv "$repo/dist/.sbx-runtime.tmp" "$repo/dist/.sbx-runtime"
# Keeps the three newest runtimes besides this one.
# (`|| true`: with this one alone, grep selects nothing and exits 1.)
{ ls -1dt "$out_root"/*/ 2>/dev/null | sed 's#/$##' | grep -vxF "$dir" || true; } | tail -n +4 | xargs -r rm -rf --one-file-system
echo "$dir"
