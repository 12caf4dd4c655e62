#!/usr/bin/env bash
# Removes the containers, volumes and networks that an sbx from before installation ids left on
# this Docker engine: those labelled `sbx.owner=OWNER` (default $SBX_OWNER, else `sbx`) without
# an `sbx.installation` label. A control plane of today never touches them (it cannot tell whose
# they are), so they stay until removed by hand — with this, once no older control plane runs.
# Prints what it removes, one line each.
set -euo pipefail

owner="${1:-${SBX_OWNER:-sbx}}"
[[ "$owner" =~ ^[a-zA-Z0-9_.-]+$ ]] || { echo "remove-legacy: invalid owner '$owner'" >&2; exit 2; }

# `<id>\t<installation label>` lines in; the ids of those with an empty label out.
unlabelled() { awk -F '\t' '$2 == "" { print $1 }'; }

mapfile -t containers < <(docker ps -a --filter "label=sbx.owner=$owner" --format '{{.ID}}\t{{.Label "sbx.installation"}}' | unlabelled)
for id in "${containers[@]}"; do docker rm -f -v "$id" >/dev/null && echo "removed container $id"; done
mapfile -t volumes < <(docker volume ls --filter "label=sbx.owner=$owner" --format '{{.Name}}\t{{.Label "sbx.installation"}}' | unlabelled)
for name in "${volumes[@]}"; do docker volume rm "$name" >/dev/null && echo "removed volume $name"; done
mapfile -t networks < <(docker network ls --filter "label=sbx.owner=$owner" --format '{{.ID}}\t{{.Label "sbx.installation"}}' | unlabelled)
for id in "${networks[@]}"; do docker network rm "$id" >/dev/null && echo "removed network $id"; done
