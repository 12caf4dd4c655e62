#!/usr/bin/env bash
# k8s-lab.sh: a real 3-node Kubernetes 1.20.2 cluster on this one machine, for the Kubernetes
# driver's tests. Each node is a network namespace with a Docker engine of its own and a kubelet
# (dockershim) on it; etcd, the API server, the scheduler and the controller manager run in a
# hub namespace whose bridge joins the nodes. Nothing is added to the host's own network
# namespace, and the host's Docker engine is left alone.
#
#   up        brings the lab up (binaries from k8s-build.sh's cache), prints the nodes, writes
#             $SBX_LAB_DIR/env (KUBECONFIG, the registry, the hub namespace).
#             Also the namespaces of control-plane replicas (${NAME}cp1.., at $NET.21..; a test starts
#             the control planes in them) and, in the hub, one address in front of them and of
#             control planes deployed into the cluster as host-network Pods (haproxy):
#             $NET.1:7071 for the agents' link (the node relays pipe there; also to a control plane
#             the tests run in the hub, on $NET.1:7170) and $NET.1:8080 for the API.
#   push IMG  copies an image of the host engine into the lab's registry as <registry>/IMG.
#   kubectl   kubectl against the lab, run in the hub namespace.
#   down      stops exactly what `up` started, by pid, removes its namespaces, mounts, cgroups and
#             directory, then checks that none of them is left (exit 1 naming what is).
#
# Settings: SBX_LAB_NAME (namespace prefix, default sbxk; two checkouts on one machine pick two
# names), SBX_LAB_NET (the hub's /24, default 10.231.0), SBX_LAB_NODES (3), SBX_LAB_RUNSC_NODES
# (nodes whose engine runs gVisor by default, "3"), SBX_LAB_CP_REPLICAS (2), SBX_LAB_CONTAINER_PIDS (512; the wrapper below),
# SBX_K8S_CACHE (k8s-build.sh's cache).
#
# Facts this relies on, each found on this kind of machine: `ip netns exec` remounts /sys and
# hides the cgroup v1 mounts (so nsenter, and a sysfs of the node's own namespace in a private
# mount namespace); the VM refuses a negative oom_score_adj, which every pod sandbox asks for (so
# an OCI-runtime wrapper clamps it to 0); kubelet rewrites global sysctls (so it writes private
# copies); nothing can be pulled (so a registry of the lab's own, and a pause image compiled from
# the Kubernetes tree). Pods get an eth0 that goes nowhere (write_cni_plugin): a sandbox's network is `none`.
# The kubelets allow anonymous, unauthorized access (the API server reaches them for logs with no
# client certificate); only the lab's own namespaces can reach them, and no sandbox has a network.
set -euo pipefail
NAME="${SBX_LAB_NAME:-sbxk}"
NET="${SBX_LAB_NET:-10.231.0}"
NODES="${SBX_LAB_NODES:-3}"
RUNSC_NODES=" ${SBX_LAB_RUNSC_NODES-3} "
REPLICAS="${SBX_LAB_CP_REPLICAS:-2}"
BIN="${SBX_K8S_CACHE:-/var/cache/sbx/k8s-1.20.2}"
LAB="${SBX_LAB_DIR:-/var/tmp/$NAME-lab}"
HUB="/run/netns/${NAME}hub"
K="$LAB/k8s"
REGISTRY="$NET.1:5000"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REDIS_SOCKET="${SBX_LAB_REDIS_SOCKET:-${SBX_DATA_DIR:-/var/lib/sbx}/redis-socket/redis.sock}"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
say() { echo "k8s-lab: $*" >&2; }
elapsed() { awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME-$1}"; }
engine() { local i=$1; shift; docker -H "unix://$LAB/n$i/docker.sock" "$@"; }
kc() { nsenter --net="$HUB" "$BIN/kubectl" --kubeconfig "$K/admin.kubeconfig" "$@"; }

# Starts a daemon in netns $2, recording its pid in $LAB/$1.pid (every wrapper execs, so the pid is the daemon's).
spawn() {
  local name=$1 ns=$2; shift 2
  setsid nsenter --net="$ns" "$@" >"$LAB/$name.log" 2>&1 </dev/null &
  echo $! >"$LAB/$name.pid"
}

wait_for() { # what tries command...: up to 60 s
  local what=$1 tries=$2; shift 2
  for _ in $(seq 1 "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  say "$what did not come up"; return 1
}

packages() {
  local want=() p
  for p in etcd-server containernetworking-plugins docker-registry docker.io jq iproute2 util-linux openssl haproxy; do
    dpkg -s "$p" >/dev/null 2>&1 || want+=("$p")
  done
  ((${#want[@]} == 0)) || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${want[@]}" >/dev/null
}

# The OCI-runtime wrapper of every node engine. (1) This VM refuses a negative oom_score_adj
# (EIO), which every pod sandbox asks for, and runc then fails with "can't get final child's PID
# from pipe": the wrapper clamps it to 0. (2) Kubernetes 1.20 has no per-container pids limit
# (the kubelet's --pod-max-pids is per node and needs QoS cgroups, off in this lab): the wrapper
# gives every container of the node SBX_LAB_CONTAINER_PIDS (512) as a node's runtime
# configuration would, and the driver's prepare step reads it back from the pids cgroup.
write_oci_wrapper() {
  cat >"$LAB/oci-clamp" <<W
#!/bin/sh
pids=${SBX_LAB_CONTAINER_PIDS:-512}
W
  cat >>"$LAB/oci-clamp" <<'W'
case "${0##*-}" in runsc) real=/usr/bin/runsc ;; *) real=/usr/sbin/runc ;; esac
prev=""
for a in "$@"; do
  f="" kind=""
  case "$prev" in --bundle|-b) f="$a/config.json" kind=bundle ;; --process|-p) f="$a" kind=process ;; esac
  case "$a" in --bundle=*) f="${a#--bundle=}/config.json" kind=bundle ;; esac
  if [ -n "$f" ] && [ -f "$f" ]; then
    if [ "$kind" = bundle ]; then
      jq --argjson pids "$pids" 'if (.process.oomScoreAdj? // 0) < 0 then .process.oomScoreAdj = 0 else . end
        | if ((.linux.resources.pids.limit? // 0) <= 0 or .linux.resources.pids.limit > $pids) then .linux.resources.pids.limit = $pids else . end' \
        "$f" >"$f.tmp" && mv "$f.tmp" "$f"
    else
      jq 'if (.oomScoreAdj? // 0) < 0 then .oomScoreAdj = 0 else . end' "$f" >"$f.tmp" && mv "$f.tmp" "$f"
    fi
  fi
  prev="$a"
done
exec "$real" "$@"
W
  chmod +x "$LAB/oci-clamp"
  ln -sf oci-clamp "$LAB/oci-clamp-runc"
  ln -sf oci-clamp "$LAB/oci-clamp-runsc"
}

# The lab's CNI plugin: each Pod gets an `eth0` that goes nowhere, a bridge with no port, one
# /32 address, IPv6 off, and no route. Kubernetes needs a Pod IP (a sandbox without one on eth0
# is killed and made again), and a sandbox's network is `none`: nothing leaves the Pod. The
# driver's prepare step checks the Pod has no route, whatever the CNI.
write_cni_plugin() {
  mkdir -p "$LAB/cni-bin"
  cat >"$LAB/cni-bin/sbx-isolated" <<'P'
#!/bin/sh
case "$CNI_COMMAND" in
  ADD)
    cat >/dev/null
    n=$(printf '%s' "$CNI_CONTAINERID" | cksum | cut -d' ' -f1)
    addr="10.254.$((n / 254 % 256)).$((n % 254 + 1))"
    nsenter --net="$CNI_NETNS" sh -c "ip link add $CNI_IFNAME type bridge && echo 1 >/proc/sys/net/ipv6/conf/$CNI_IFNAME/disable_ipv6 &&
      ip addr add $addr/32 dev $CNI_IFNAME && ip link set $CNI_IFNAME up" >&2 || exit 1
    printf '{"cniVersion":"0.4.0","interfaces":[{"name":"%s","sandbox":"%s"}],"ips":[{"version":"4","address":"%s/32","interface":0}]}\n' \
      "$CNI_IFNAME" "$CNI_NETNS" "$addr" ;;
  VERSION) echo '{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0"]}' ;;
  *) cat >/dev/null ;;
esac
P
  chmod +x "$LAB/cni-bin/sbx-isolated"
}

start_engine() { # node
  local i=$1 d=$LAB/n$1 rt=runc-clamp
  [[ $RUNSC_NODES == *" $i "* ]] && rt=runsc-clamp
  mkdir -p "$d/data" "$d/exec"
  cat >"$d/daemon.json" <<J
{ "hosts": ["unix://$d/docker.sock"], "data-root": "$d/data", "exec-root": "$d/exec", "pidfile": "$d/docker.pid",
  "cgroup-parent": "/$NAME$i", "storage-driver": "overlay2", "log-driver": "json-file", "iptables": false, "bridge": "none",
  "default-runtime": "$rt", "insecure-registries": ["$REGISTRY"],
  "runtimes": { "runc-clamp": { "path": "$LAB/oci-clamp-runc" },
                "runsc-clamp": { "path": "$LAB/oci-clamp-runsc", "runtimeArgs": ["--platform=ptrace", "--network=host", "--host-uds=open"] } } }
J
  # The node's own mount namespace (a slave of the host's), which its kubelet joins: the volumes
  # kubelet mounts for a Pod (a memory emptyDir's tmpfs) must be seen by the engine that starts
  # the Pod's containers. In it: a sysfs of the node's netns with the host's cgroups back in, a
  # private /var/log, private copies of the global sysctls kubelet rewrites (the host keeps its own),
  # and a directory of this node's own at the path every node has it ($LAB/node: host paths of
  # Pods, such as the node relay's directory, $LAB/node/relay, are per node as on machines).
  mkdir -p "$d/sysctl" "$d/local/relay" "$LAB/node"
  spawn "engine-$i" "/run/netns/$NAME$i" unshare --uts --mount --propagation slave -- sh -c '
    set -e; hostname "$1"; mkdir -p "$2/cg"
    mount --rbind /sys/fs/cgroup "$2/cg"; mount -t sysfs sysfs /sys; mount --rbind "$2/cg" /sys/fs/cgroup; umount -l "$2/cg"
    for s in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
      f="$2/sysctl/$(echo $s | tr / _)"; cat "/proc/sys/$s" >"$f"; mount --bind "$f" "/proc/sys/$s"
    done
    mount -t tmpfs tmpfs /var/log
    mount --bind "$2/local" "$3"
    exec dockerd --config-file "$2/daemon.json"' sh "$NAME$i" "$d" "$LAB/node"
}

# The node relays (node-relay/main.ts), as a cluster runs them, one per node: each serves
# redis.sock and link.sock in its node's relay directory and pipes them over the lab's network to
# the hub, where the lab exposes the host's Redis socket on $NET.1:6390 and the front of the control
# planes' link listeners is on $NET.1:7071, both TLS (make_tls). A sandbox then reaches nothing of the control plane's host
# but through them.
start_relays() {
  local relay="$REPO/dist/node-relay/main.js" i
  [[ -f $relay ]] || { say "$relay is missing: npm run build"; exit 1; }
  spawn redis-forward "$HUB" node "$relay" --forward "tls:$NET.1:6390=unix:$REDIS_SOCKET" --cert "$LAB/tls/link.pem" --key "$LAB/tls/link.key"
  for i in $(seq 1 "$NODES"); do
    spawn "relay-$i" "/run/netns/$NAME$i" env NODE_EXTRA_CA_CERTS="$LAB/tls/ca.pem" node "$relay" \
      --forward "unix:$LAB/n$i/local/relay/redis.sock=tls:$NET.1:6390" --forward "unix:$LAB/n$i/local/relay/link.sock=tls:$NET.1:7071"
  done
}

# The links between nodes and the hub are TLS, as across machines: a CA of the lab's own and one
# certificate for every address a node dials (the hub's Redis and link front, the replicas',
# whose listeners a replica passing a connection on dials). Valid 2 days; the lab is torn down first.
make_tls() {
  local d=$LAB/tls sans="IP:$NET.1" j
  for j in $(seq 1 "$REPLICAS"); do sans+=",IP:$NET.$((20 + j))"; done
  # And the nodes: a control plane deployed as host-network Pods listens at its node's address.
  for j in $(seq 1 "$NODES"); do sans+=",IP:$NET.$((10 + j))"; done
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=sbx lab CA" \
    -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=sbx lab link" -keyout "$d/link.key" -out "$d/link.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$sans" >"$d/link.ext"
  openssl x509 -req -in "$d/link.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 -extfile "$d/link.ext" \
    -out "$d/link.pem" 2>/dev/null
}

# A network namespace on the hub's bridge: name, address.
join_bridge() {
  local ns=$1 address=$2 veth="v$1"
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" netns "${NAME}hub"
  ip -n "${NAME}hub" link set "$veth" master br0 up
  ip -n "$ns" addr add "$address/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" route add default via "$NET.1"
}

# One address in front of the control planes, as a Service or a load balancer would be: TCP,
# round robin over those that accept connections (checked every 500 ms; a connection refused is
# tried on another). The link's backends are the replicas and a control plane in the hub itself.
start_front() {
  # The link's checks complete a TLS handshake (a bare connect would log a failed one each time).
  local j check="check check-ssl verify none inter 500 fall 1 rise 1"
  local link="    server hub $NET.1:7170 $check" api=""
  for j in $(seq 1 "$REPLICAS"); do
    link+=$'\n'"    server cp$j $NET.$((20 + j)):7071 $check"
    api+=$'\n'"    server cp$j $NET.$((20 + j)):8080 check inter 500 fall 1 rise 1"
  done
  # Control planes deployed into the cluster (deploy/kubernetes/kubernetes-driver/), as host-network Pods.
  for j in $(seq 1 "$NODES"); do
    link+=$'\n'"    server n$j $NET.$((10 + j)):7071 $check"
    api+=$'\n'"    server n$j $NET.$((10 + j)):7070 check inter 500 fall 1 rise 1"
  done
  cat >"$LAB/front.cfg" <<F
global
    maxconn 4096
defaults
    mode tcp
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    retries 3
    option redispatch
frontend link
    bind $NET.1:7071
    default_backend link
backend link
    balance roundrobin
$link
frontend api
    bind $NET.1:8080
    default_backend api
backend api
    balance roundrobin$api
F
  spawn front "$HUB" haproxy -db -f "$LAB/front.cfg"
}

start_kubelet() { # node
  local i=$1 d=$K/n$i rt=runc
  [[ $RUNSC_NODES == *" $i "* ]] && rt=runsc
  mkdir -p "$d/root" "$d/pki" "$d/dockershim" "$d/volume-plugins" "$d/cni"
  printf '{"cniVersion":"0.4.0","name":"sbx-isolated","type":"sbx-isolated"}\n' >"$d/cni/10-sbx-isolated.conf"
  # In the node's engine's namespaces (network, mount, hostname): see start_engine. Memory emptyDirs
  # are tmpfs of their sizeLimit (SizeMemoryBackedVolumes: alpha in 1.20, on by default from 1.22).
  local engine_pid; engine_pid=$(cat "$LAB/engine-$i.pid")
  setsid nsenter --target "$engine_pid" --net --mount --uts \
    "$BIN/kubelet" --kubeconfig="$K/admin.kubeconfig" --hostname-override="$NAME$i" --node-ip="$NET.$((10 + i))" \
    --container-runtime=docker --docker-endpoint="unix://$LAB/n$i/docker.sock" \
    --container-runtime-endpoint="unix://$d/dockershim.sock" --experimental-dockershim-root-directory="$d/dockershim" \
    --pod-infra-container-image=sbx-lab/pause:3.2 --root-dir="$d/root" --cert-dir="$d/pki" --volume-plugin-dir="$d/volume-plugins" \
    --network-plugin=cni --cni-bin-dir="/usr/lib/cni,$LAB/cni-bin" --cni-conf-dir="$d/cni" \
    --cgroup-driver=cgroupfs --cgroups-per-qos=false --enforce-node-allocatable= --fail-swap-on=false \
    --anonymous-auth=true --authorization-mode=AlwaysAllow --read-only-port=0 --healthz-port=0 --resolv-conf="$K/resolv.conf" \
    --feature-gates=SizeMemoryBackedVolumes=true --node-labels="sbx.runtime=$rt" --node-status-update-frequency=4s >"$LAB/kubelet-$i.log" 2>&1 </dev/null &
  echo $! >"$LAB/kubelet-$i.pid"
}

up() {
  local t0=$EPOCHREALTIME i b token
  for b in kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl pause; do
    [[ -x $BIN/$b ]] || { say "$BIN/$b is missing: run test/lab/k8s-build.sh first"; exit 1; }
  done
  [[ ! -e $HUB ]] || { say "lab $NAME is up already (down first)"; exit 1; }
  packages
  mkdir -p "$LAB" "$K/etcd" "$K/certs" "$K/pause"
  echo "$NODES" >"$LAB/nodes"
  write_oci_wrapper
  write_cni_plugin
  make_tls
  ip netns add "${NAME}hub"
  ip -n "${NAME}hub" link add br0 type bridge
  ip -n "${NAME}hub" addr add "$NET.1/24" dev br0
  ip -n "${NAME}hub" link set br0 up
  ip -n "${NAME}hub" link set lo up
  mkdir -p "$LAB/registry-data"
  printf 'version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s}, delete: {enabled: true}}\nhttp: {addr: "%s"}\n' \
    "$LAB/registry-data" "$REGISTRY" >"$LAB/registry.yml"
  spawn registry "$HUB" docker-registry serve "$LAB/registry.yml"
  for i in $(seq 1 "$NODES"); do
    join_bridge "$NAME$i" "$NET.$((10 + i))"
    start_engine "$i"
  done
  for i in $(seq 1 "$REPLICAS"); do join_bridge "${NAME}cp$i" "$NET.$((20 + i))"; done
  echo "$REPLICAS" >"$LAB/replicas"
  start_front
  for i in $(seq 1 "$NODES"); do wait_for "engine $i" 300 engine "$i" version; done
  say "$NODES engines up in $(elapsed "$t0") s"

  # The pod sandbox image, compiled from the same Kubernetes tree: nothing can be pulled here.
  cp "$BIN/pause" "$K/pause/pause"
  tar -C "$K/pause" -cf "$K/pause.tar" pause
  for i in $(seq 1 "$NODES"); do engine "$i" import -c 'ENTRYPOINT ["/pause"]' "$K/pause.tar" sbx-lab/pause:3.2 >/dev/null; done

  openssl genrsa -out "$K/sa.key" 2048 2>/dev/null
  openssl rsa -in "$K/sa.key" -pubout -out "$K/sa.pub" 2>/dev/null
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  echo "$token,admin,admin,\"system:masters\"" >"$K/tokens.csv"
  printf 'apiVersion: v1\nkind: Config\nclusters: [{name: lab, cluster: {server: "https://%s.1:6443", insecure-skip-tls-verify: true}}]\nusers: [{name: admin, user: {token: "%s"}}]\ncontexts: [{name: lab, context: {cluster: lab, user: admin}}]\ncurrent-context: lab\n' \
    "$NET" "$token" >"$K/admin.kubeconfig"
  : >"$K/resolv.conf"
  spawn etcd "$HUB" etcd --name lab --data-dir "$K/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster lab=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
  spawn apiserver "$HUB" "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=0.0.0.0 --secure-port=6443 \
    --insecure-port=0 --advertise-address="$NET.1" --service-cluster-ip-range=10.96.0.0/24 --token-auth-file="$K/tokens.csv" \
    --authorization-mode=RBAC --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$K/sa.pub" \
    --service-account-signing-key-file="$K/sa.key" --cert-dir="$K/certs" --allow-privileged=false --profiling=false \
    --kubelet-preferred-address-types=InternalIP
  wait_for "the API server" 300 kc get --raw /readyz
  local common=(--kubeconfig="$K/admin.kubeconfig" --authentication-kubeconfig="$K/admin.kubeconfig"
    --authorization-kubeconfig="$K/admin.kubeconfig" --leader-elect=false --bind-address=127.0.0.1 --port=0)
  spawn scheduler "$HUB" "$BIN/kube-scheduler" "${common[@]}"
  spawn controller-manager "$HUB" "$BIN/kube-controller-manager" "${common[@]}" --service-account-private-key-file="$K/sa.key" \
    --root-ca-file="$K/certs/apiserver.crt" --use-service-account-credentials=false \
    --node-monitor-grace-period=16s --pod-eviction-timeout=10s
  start_relays
  for i in $(seq 1 "$NODES"); do start_kubelet "$i"; done
  for _ in $(seq 1 300); do
    [[ $(kc get nodes --no-headers 2>/dev/null | grep -c ' Ready ') == "$NODES" ]] && break
    sleep 0.5
  done
  kc get nodes -L sbx.runtime
  [[ $(kc get nodes --no-headers 2>/dev/null | grep -c ' Ready ') == "$NODES" ]] || { say "nodes not Ready"; exit 1; }
  cat >"$LAB/env" <<E
export SBX_LAB_HUB=$HUB
export SBX_K8S_KUBECONFIG=$K/admin.kubeconfig
export SBX_LAB_REGISTRY=$REGISTRY
export SBX_LAB_NODES=$NODES
export SBX_LAB_NODE_PREFIX=$NAME
export SBX_LAB_DIR=$LAB
export SBX_LAB_NODE_DIR=$LAB/node
export SBX_LAB_RELAY_DIR=$LAB/node/relay
export SBX_LAB_LINK_LISTEN=$NET.1:7170
export SBX_LAB_REDIS_URL=rediss://$NET.1:6390
export SBX_LAB_TLS_CA=$LAB/tls/ca.pem
export SBX_LAB_TLS_CERT=$LAB/tls/link.pem
export SBX_LAB_TLS_KEY=$LAB/tls/link.key
export SBX_LAB_API=$NET.1:8080
export SBX_LAB_REPLICAS="$(for i in $(seq 1 "$REPLICAS"); do printf '/run/netns/%scp%s=%s.%s ' "$NAME" "$i" "$NET" $((20 + i)); done)"
E
  say "kubernetes with $NODES nodes Ready in $(elapsed "$t0") s; settings in $LAB/env"
}

push() {
  local img
  for img in "$@"; do
    docker save "$img" | engine 1 load -q >/dev/null
    engine 1 tag "$img" "$REGISTRY/$img"
    engine 1 push -q "$REGISTRY/$img" >/dev/null
    engine 1 rmi "$REGISTRY/$img" >/dev/null
    say "pushed $REGISTRY/$img"
  done
}

stop_pid() { # pidfile: TERM, up to 20 s, then KILL
  local p
  p=$(cat "$1" 2>/dev/null) || return 0
  kill -0 "$p" 2>/dev/null || return 0
  kill -TERM "$p" 2>/dev/null || return 0
  for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.2; done
  say "$(basename "$1" .pid) (pid $p) did not stop; KILL"
  kill -KILL "$p" 2>/dev/null || true
}

# Processes whose command line names this lab's directory (shims, runsc sandboxes an engine left behind).
lab_processes() {
  local q
  for q in /proc/[0-9]*; do
    { tr '\0' ' ' <"$q/cmdline"; } 2>/dev/null | grep -qF -- "$LAB/" && echo "${q#/proc/}"
  done
  return 0
}

lab_cgroups() { find /sys/fs/cgroup -maxdepth 2 -type d \( -name "$NAME[0-9]*" -o -name "${NAME}hub" \) 2>/dev/null || true; }

down() {
  local f left q n
  n=$(cat "$LAB/nodes" 2>/dev/null || echo "$NODES")
  for f in "$LAB"/kubelet-*.pid "$LAB/controller-manager.pid" "$LAB/scheduler.pid" "$LAB/apiserver.pid" "$LAB/etcd.pid"; do
    [[ -f $f ]] && stop_pid "$f"
  done
  for f in "$LAB"/relay-*.pid "$LAB/redis-forward.pid" "$LAB/front.pid" "$LAB"/engine-*.pid; do [[ -f $f ]] && stop_pid "$f"; done
  mapfile -t left < <(lab_processes)
  if ((${#left[@]})); then
    say "stopping ${#left[@]} leftover processes of the lab"
    kill -TERM "${left[@]}" 2>/dev/null || true
    for q in "${left[@]}"; do for _ in $(seq 1 25); do kill -0 "$q" 2>/dev/null || break; sleep 0.2; done; kill -KILL "$q" 2>/dev/null || true; done
  fi
  [[ -f $LAB/registry.pid ]] && stop_pid "$LAB/registry.pid"
  for i in $(seq 1 "$n"); do ip netns del "$NAME$i" 2>/dev/null || true; done
  for i in $(seq 1 "$(cat "$LAB/replicas" 2>/dev/null || echo "$REPLICAS")"); do ip netns del "${NAME}cp$i" 2>/dev/null || true; done
  ip netns del "${NAME}hub" 2>/dev/null || true
  # Mounts under the lab (a node engine's overlays, kubelet's volumes) that outlived their namespace.
  { grep -F " $LAB/" /proc/self/mountinfo || true; } | awk '{print $5}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  lab_cgroups | while read -r q; do find "$q" -depth -type d -exec rmdir {} \; 2>/dev/null || true; done
  rm -rf "${LAB:?}"
  check_gone
}

check_gone() {
  local problems=()
  [[ -z $(ip netns list | grep -E "^${NAME}(hub|[0-9]+|cp[0-9]+)( |$)" || true) ]] || problems+=("network namespaces: $(ip netns list | grep -E "^${NAME}(hub|[0-9]+|cp[0-9]+)( |$)" | tr '\n' ' ')")
  [[ -z $(lab_processes) ]] || problems+=("processes: $(lab_processes | tr '\n' ' ')")
  ! grep -qF " $LAB/" /proc/self/mountinfo || problems+=("mounts under $LAB")
  [[ -z $(lab_cgroups) ]] || problems+=("cgroups: $(lab_cgroups | tr '\n' ' ')")
  [[ ! -e $LAB ]] || problems+=("directory $LAB")
  if ((${#problems[@]})); then printf 'k8s-lab: left behind: %s\n' "${problems[@]}" >&2; return 1; fi
  say "lab $NAME is down; no namespace, process, mount, cgroup or directory of it is left"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  push) shift; push "$@" ;;
  kubectl) shift; kc "$@" ;;
  check) check_gone ;;
  *) echo "usage: $0 up | push IMAGE... | kubectl ARGS... | down | check" >&2; exit 2 ;;
esac
