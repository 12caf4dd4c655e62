/**
 * Where the sbx agent runtime appears inside every sandbox: a read-only mount of the directory
 * `images/runtime/build-runtime.sh` builds, whatever the image holds. Self-contained (node with
 * its own loader and libraries, a static tini and busybox, GNU tar), so a sandbox's image needs
 * no Node, no shell and no libc of its own. Both the control plane (container command, file
 * transfers) and the agent (the shell of last resort) read these paths from here.
 */

/** The mount point of the runtime. */
export const AGENT_RUNTIME_DIR = '/opt/sbx';
/** The init (PID 1): tini, static; `-g` forwards signals to the whole process group. */
export const AGENT_RUNTIME_INIT = `${AGENT_RUNTIME_DIR}/bin/tini`;
/** node, patched to load only the runtime's own glibc loader and libraries. */
export const AGENT_RUNTIME_NODE = `${AGENT_RUNTIME_DIR}/bin/node`;
/** A static busybox (sh and the utilities of the transfer scripts). */
export const AGENT_RUNTIME_BUSYBOX = `${AGENT_RUNTIME_DIR}/bin/busybox`;
/** The file watch's inotify helper, static (images/runtime/sbx-inotify.c). */
export const AGENT_RUNTIME_INOTIFY = `${AGENT_RUNTIME_DIR}/bin/sbx-inotify`;
/** The launcher of `exec` calls, static (images/runtime/sbx-exec.c): raises the program's oom_score_adj, then execs it. */
export const AGENT_RUNTIME_EXEC = `${AGENT_RUNTIME_DIR}/bin/sbx-exec`;
/** The agent bundle. */
export const AGENT_RUNTIME_AGENT = `${AGENT_RUNTIME_DIR}/agent/sbx-agent.cjs`;
/**
 * The node flags the agent runs with: V8's `gc` exposed (the agent scavenges the buffers of the
 * bulk bytes it passed on: sandbox-agent/output/buffer-reclaim.ts), and a young generation of at
 * most 4 MiB a semi-space (V8's default lets it grow to 16 under a stream's allocations, and the
 * pages stay: bench `stdout-stream` measured the agent's RSS growth over 200 MB of stdout at
 * 33.7–40 MiB with the default, 25.7–27.0 MiB with this, at the same rate, the same CPU per call
 * and the same idle RSS in `density`). V8 takes a code cache only
 * from a node with the same flags, so `images/runtime/build-runtime.sh` writes the agent's with
 * these (its `agent_flags`; contract/agent-runtime.test.ts holds the two together).
 */
export const AGENT_NODE_FLAGS: readonly string[] = ['--expose-gc', '--max-semi-space-size=4'];
/** The agent's command line: the runtime's node, its flags, the bundle. */
export const AGENT_COMMAND: readonly string[] = [AGENT_RUNTIME_NODE, ...AGENT_NODE_FLAGS, AGENT_RUNTIME_AGENT];
/** Preloaded into tool processes' Node in network mode `allowlist`, so `fetch` goes through the egress proxy (sandbox-agent/egress/). */
export const AGENT_RUNTIME_FETCH_PROXY = `${AGENT_RUNTIME_DIR}/agent/sbx-fetch-proxy-loader.cjs`;
/** The directory of the runtime's own tools (busybox applets, GNU tar): the fallback of file transfers in an image without them. */
export const AGENT_RUNTIME_TOOLS = `${AGENT_RUNTIME_DIR}/tools`;
/** GNU tar of the runtime: transfers, seeding of writable roots and snapshots run it, never the image's. */
export const AGENT_RUNTIME_TAR = `${AGENT_RUNTIME_TOOLS}/tar`;
/** busybox's sh: the shell `exec` falls back to in an image with neither bash nor sh. */
export const AGENT_RUNTIME_SHELL = `${AGENT_RUNTIME_TOOLS}/sh`;
