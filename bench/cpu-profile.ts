/**
 * CPU profiles for the closing note of a missed target: the agent's, taken inside its sandbox
 * (the agent is sent SIGUSR1, which opens Node's inspector on 127.0.0.1:9229 of the sandbox's
 * own network namespace; a `node` run by `docker exec` as root in the same sandbox drives the
 * V8 profiler over the DevTools protocol and prints the profile), and a summary of any
 * `.cpuprofile` by self time. Only for the bench: it opens a debugger port inside the sandbox.
 */
import type Docker from 'dockerode';
import { AGENT_COMMAND } from '../contract/agent-runtime.js';
import { dockerExec } from './baseline.js';

/** Runs in the sandbox: profile the inspector target for `durationMs`, print the profile JSON. */
const PROFILER = `
const durationMs = Number(process.argv[1]);
(async () => {
  let list;
  for (let i = 0; i < 50 && !list; i++) {
    try { list = await (await fetch('http://127.0.0.1:9229/json/list')).json(); } catch { await new Promise((r) => setTimeout(r, 100)); }
  }
  const ws = new WebSocket(list[0].webSocketDebuggerUrl);
  await new Promise((r, j) => { ws.onopen = r; ws.onerror = j; });
  let id = 0; const waiting = new Map();
  ws.onmessage = (m) => { const msg = JSON.parse(m.data); if (waiting.has(msg.id)) { waiting.get(msg.id)(msg.result); waiting.delete(msg.id); } };
  const send = (method, params = {}) => new Promise((r) => { const n = ++id; waiting.set(n, r); ws.send(JSON.stringify({ id: n, method, params })); });
  await send('Profiler.enable');
  await send('Profiler.setSamplingInterval', { interval: 200 });
  await send('Profiler.start');
  process.stderr.write('profiling\\n');
  await new Promise((r) => setTimeout(r, durationMs));
  const { profile } = await send('Profiler.stop');
  ws.close();
  process.stdout.write(JSON.stringify(profile), () => process.exit(0));
})().catch((e) => { process.stderr.write(String(e && e.stack || e)); process.exit(1); });
`;

/**
 * Profiles the agent of `container` while `workload` runs (it starts once the profiler runs;
 * profiling lasts `durationMs`, which should outlast the workload). Returns the .cpuprofile JSON.
 */
export async function profileAgent(docker: Docker, container: string, durationMs: number, workload: () => Promise<void>): Promise<string> {
  const pid = await execText(docker, container, ['pgrep', '-f', `^${AGENT_COMMAND.join(' ')}$`]);
  await dockerExec(docker, container, ['kill', '-USR1', pid.trim().split('\n')[0]!], { user: '0' });
  const chunks: Buffer[] = [];
  const profiling = dockerExec(docker, container, ['/opt/sbx/bin/node', '--experimental-websocket', '-e', PROFILER, String(durationMs)], {
    user: '0',
    onStdout: (c) => chunks.push(c),
  });
  await new Promise((r) => setTimeout(r, 1500)); // inspector open, profiler started
  await workload();
  const outcome = await profiling;
  if (outcome.exitCode !== 0) throw new Error(`the agent profiler exited ${outcome.exitCode}`);
  return Buffer.concat(chunks).toString();
}

async function execText(docker: Docker, container: string, cmd: string[]): Promise<string> {
  const chunks: Buffer[] = [];
  await dockerExec(docker, container, cmd, { user: '0', onStdout: (c) => chunks.push(c) });
  return Buffer.concat(chunks).toString();
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

/**
 * Self time by function (ms and share of the samples), largest first: `name (file:line)`.
 * `(idle)` — the process waiting for I/O — is listed too, as the share of time it was not busy.
 */
export function topSelfTime(profileJson: string, limit = 15): Array<{ fn: string; ms: number; share: number }> {
  const profile = JSON.parse(profileJson) as {
    nodes: ProfileNode[];
    startTime: number;
    endTime: number;
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((nodeId, i) => {
    const dt = profile.timeDeltas[i + 1] ?? 0;
    const node = byId.get(nodeId);
    if (!node) return;
    const f = node.callFrame;
    const file = f.url.split('/').slice(-2).join('/');
    const key = `${f.functionName || '(anonymous)'}${file ? ` (${file}:${f.lineNumber + 1})` : ''}`;
    selfUs.set(key, (selfUs.get(key) ?? 0) + dt);
    total += dt;
  });
  return [...selfUs.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, limit)
    .map(([fn, us]) => ({ fn, ms: us / 1000, share: total > 0 ? us / total : 0 }));
}
