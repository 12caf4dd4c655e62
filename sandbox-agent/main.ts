/**
 * The sandbox agent (PID 2 under tini inside every sandbox; boot.ts loads this bundle and calls
 * `startAgent`). Reads its
 * credentials file, connects to its lease's keys over the mounted Redis socket, announces itself
 * with the sandbox facts, and works the lease's inbox until SIGTERM.
 *
 * Settings: `SBX_AGENT_CONFIG` (default `/run/sbx/agent/agent.json`), `SBX_AGENT_CONCURRENCY`
 * (calls run at once, default 16).
 *
 * Logs: JSON lines (pino) on stderr, which the container runtime keeps (`docker logs`); every
 * line carries `sandboxId`, and a call's lines its `callId` and `attemptId`. The `agent ready`
 * line carries `startupMs` (each step of the start, ms since the process started) and `codeCache`.
 */
import { readFileSync } from 'node:fs';
import { chmod, mkdir, readdir, rm } from 'node:fs/promises';
import { Redis } from 'ioredis';
import pino from 'pino';
import { AgentConfig, AgentHello, ControlMessage, LeaseBinding, leaseKeys, type BindAck } from '../contract/queue.js';
import type { CodeCacheUse } from './boot.js';
import type { AgentTool } from './execution/attempt.js';
import { CallRunner } from './execution/call-runner.js';
import { startEgressForwarder } from './host/egress-forwarder.js';
import { measureFacts } from './host/facts.js';
import { dialPreview } from './host/preview-dialer.js';
import { runTransfer } from './host/transfer-runner.js';
import { ArtifactShelf } from './link/artifact-shelf.js';
import { detectShell } from './host/image-probe.js';
import { redisInput, type StreamEntry } from './link/input-stream.js';
import { Inbox, redisInboxConnection } from './link/inbox.js';
import { ReturnChannel, type ReturnStream } from './link/return-channel.js';
import { redisBeginAttempt } from './link/attempt-start.js';
import { AccessScheduler } from './execution/scheduler.js';
import { ProcessTrees } from './host/process-trees.js';
import { LeaseSecrets } from './host/secrets.js';
import { ToolUserWorker } from './tool-user/client.js';
import { runToolUserWorker } from './tool-user/worker.js';
import { execTool, toolsPath } from './tools/exec.js';
import { ShellSessions } from './session/sessions.js';
import { AGENT_RUNTIME_BUSYBOX, AGENT_RUNTIME_INOTIFY } from '../contract/agent-runtime.js';
import { FileWatch } from './host/file-watch.js';
import { ToolSpawner } from './host/tool-spawner.js';
import { redisChangeLog } from './link/change-log.js';
import { fileTools } from './tools/file-tools.js';
import { terminalTool } from './tools/terminal.js';
import { processTools } from './tools/process-tools.js';

async function main(codeCache: CodeCacheUse): Promise<void> {
  // Milestones of the start, ms since the process started (node's own start and the bundle's
  // load come before `loaded`): logged with `agent ready`, for operators and the bench.
  const startupMs: Record<string, number> = { loaded: Math.round(performance.now()) };
  const mark = (name: string): void => void (startupMs[name] = Math.round(performance.now()));
  const configPath = process.env.SBX_AGENT_CONFIG ?? '/run/sbx/agent/agent.json';
  const config = AgentConfig.parse(JSON.parse(readFileSync(configPath, 'utf8')));
  const keys = leaseKeys(config.rootPrefix, config.leaseId);
  // How the egress proxy and byte tunnels are reached: on this host, or through the node relay.
  const route = { leaseId: config.leaseId, link: config.link };
  // Measured while the agent connects: the hello that makes the lease ready waits for it.
  const facts = measureFacts(config).finally(() => mark('facts'));
  // Synchronous writes: the lines before a crash are the ones worth having.
  const log = pino({ base: { pid: process.pid, sandboxId: config.leaseId } }, pino.destination({ dest: 2, sync: true }));
  const redisOptions = {
    path: config.redis.path,
    username: config.redis.username,
    password: config.redis.password,
    maxRetriesPerRequest: null,
    // The per-lease ACL user may not run INFO-style checks on connect.
    enableReadyCheck: false,
  };
  // Connecting while the spool is cleared.
  const redis = new Redis(redisOptions);
  const subscriber = new Redis(redisOptions);
  // The spool holds other calls' output: root only (its files 0600; searchable, not listable, so the
  // tool user reaches the sessions' FIFOs by name). Leftovers of an earlier agent go.
  await mkdir(config.spool.dir, { recursive: true });
  await chmod(config.spool.dir, 0o711);
  for (const name of await readdir(config.spool.dir)) await rm(`${config.spool.dir}/${name}`, { force: true, recursive: true });
  mark('spool');
  // Taken before anything runs: a lease missing a granted secret fails instead of starting.
  const secrets = await LeaseSecrets.load(config, () => redis.getdel(keys.secrets));
  mark('redis');
  // Nothing is trimmed here: an entry leaves the stream once the control plane ledgered it.
  const returnStream: ReturnStream = {
    append: (fields) => redis.xadd(keys.returns, '*', ...fields),
  };
  const worker = new ToolUserWorker(process.argv[1]!, {
    uid: config.toolUser.uid,
    gid: config.toolUser.gid,
    home: config.toolUser.home,
    roots: config.files.roots,
    maxFileBytes: config.files.maxFileBytes,
    path: toolsPath(config),
  });
  const shell = detectShell().path;
  const sessions = new ShellSessions({ shell, dir: `${config.spool.dir}/sessions`, busybox: AGENT_RUNTIME_BUSYBOX });
  const tools = new Map<string, AgentTool<unknown>>(
    [
      sessions.withSessions(execTool) as AgentTool<unknown>,
      sessions.startTool() as AgentTool<unknown>,
      terminalTool as AgentTool<unknown>,
      ...fileTools(worker),
      ...processTools,
    ].map((t) => [t.name, t]),
  );
  const processTrees = new ProcessTrees();
  // Exec calls' processes start from the runtime's small spawn server, not by forking the agent.
  const spawner = ToolSpawner.start(log);
  // The lease's file change log (host/file-watch.ts, link/change-log.ts).
  const fileWatch = new FileWatch({
    binary: AGENT_RUNTIME_INOTIFY,
    roots: config.files.roots,
    uid: config.toolUser.uid,
    gid: config.toolUser.gid,
    log,
    writer: redisChangeLog(redis, keys.changes),
  });
  // Artifacts offered by calls wait here until the control plane fetched them over a tunnel.
  const shelf = new ArtifactShelf();
  const runner = new CallRunner({
    config,
    shell,
    scheduler: new AccessScheduler(),
    launch: spawner.launch,
    agentPids: () => new Set([worker.pid, fileWatch.pid].filter((pid): pid is number => pid !== null)),
    processTrees,
    // One connection per open input stream: XREAD BLOCK would stall every other command of a shared one.
    openInput: redisInput(
      () => {
        const conn = new Redis(redisOptions);
        return {
          readAfter: async (key, afterId, blockMs) => {
            const reply = (await conn.xread('COUNT', 100, 'BLOCK', blockMs, 'STREAMS', key, afterId)) as [string, StreamEntry[]][] | null;
            return reply?.[0]?.[1] ?? [];
          },
          consumed: async (key, bytes) => void (await redis.decrby(key, bytes)),
          remove: async (...removed) => void (await redis.del(...removed)),
          close: () => conn.disconnect(),
        };
      },
      keys.input,
      keys.inputPending,
    ),
    publish: (channel, message) => void redis.publish(channel, message).catch(() => undefined),
    keys,
    secrets,
    tools,
    shelf,
    returns: new ReturnChannel(returnStream, (err) => log.warn({ err }, 'an append to the return stream was refused; trying again')),
    log,
    beginAttempt: redisBeginAttempt((script, numKeys, ...args) => redis.eval(script, numKeys, ...args), keys),
  });

  const previewPorts = new Set(config.egress ? [config.egress.port] : []);
  subscriber.on('message', (_channel: string, text: string) => {
    const parsed = ControlMessage.safeParse(safeJson(text));
    if (!parsed.success) return;
    if (parsed.data.type === 'cancel') runner.cancel(parsed.data.callId);
    else if (parsed.data.type === 'transfer_open') runTransfer(parsed.data, { toolUser: config.toolUser, shelf, processTrees, route, log });
    else dialPreview(parsed.data, { reservedPorts: previewPorts, route, log });
  });

  const concurrency = Number(process.env.SBX_AGENT_CONCURRENCY ?? 16);
  // A pooled sandbox's first inbox entry binds it to the lease that claimed it; every other is a call.
  const bind = async (data: unknown): Promise<void> => {
    let ack: BindAck;
    try {
      const binding = LeaseBinding.parse(data);
      const leaseSecrets = await LeaseSecrets.load({ ...config, secrets: binding.secrets }, () => redis.getdel(keys.secrets));
      runner.bind(binding.env, leaseSecrets);
      ack = { ok: true };
    } catch (err) {
      ack = { ok: false, error: err instanceof Error ? err.message : String(err) };
    }
    await redis.rpush(keys.bound, JSON.stringify(ack));
  };
  // The inbox's blocking reads hold a connection of their own; acknowledgements go on the shared one.
  const inboxReader = new Redis(redisOptions);
  const inbox = new Inbox(
    redisInboxConnection(redis, inboxReader, keys.inbox),
    { call: (message) => runner.run(message), bind },
    concurrency,
    log,
  );
  // A reply lost with a dropped connection leaves its entries handed over and unread: read them again.
  let inboxConnected = false;
  inboxReader.on('ready', () => {
    if (inboxConnected) inbox.requestRecovery();
    inboxConnected = true;
  });
  inboxReader.on('error', (err) => log.warn({ err }, 'inbox connection error'));
  // Side by side: none needs another, and the hello (no call comes before it) waits for all.
  await Promise.all([
    subscriber.subscribe(keys.control).then(() => mark('subscribed')),
    inbox.start().then(() => mark('inbox')),
    config.egress ? startEgressForwarder(config.egress.port, config.egress.socketPath, route) : undefined,
    // Watching before the lease is ready, so that changes made once it is are all in the log.
    fileWatch.start(2000).then(() => mark('watch')),
  ]);

  const hello: AgentHello = { leaseId: config.leaseId, facts: await facts, startedAt: new Date().toISOString() };
  // Logged before the hello goes: the lease is ready (and may be released) as soon as it arrives.
  mark('ready');
  log.info({ concurrency, startupMs, codeCache }, 'agent ready');
  await redis.rpush(keys.hello, JSON.stringify(hello));

  const shutdown = async (): Promise<void> => {
    const stopping = inbox.stop();
    inboxReader.disconnect();
    await stopping;
    worker.stop();
    fileWatch.stop();
    spawner.stop();
    await Promise.allSettled([subscriber.quit(), redis.quit()]);
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown());
  process.once('SIGINT', () => void shutdown());
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/**
 * Starts the agent (called by boot.ts once the bundle is loaded); with `--tool-user-worker <config
 * json>` in `argv` the same bundle is the tool-user worker instead. `codeCache`: how V8's code
 * cache served this start (logged with `agent ready`). Exits 1 on a fatal error.
 */
export function startAgent(argv: string[], codeCache: CodeCacheUse): void {
  const start = argv[2] === '--tool-user-worker' ? runToolUserWorker(argv[3] ?? '') : main(codeCache);
  start.catch((err: unknown) => {
    process.stderr.write(`sbx-agent: fatal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
