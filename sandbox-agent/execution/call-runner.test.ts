import pino from 'pino';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { ERROR_CODES } from '../../contract/errors.js';
import type { EventBody } from '../../contract/events.js';
import { ToolResult } from '../../contract/objects.js';
import { AgentConfig, leaseKeys, type CallJob } from '../../contract/queue.js';
import { ArtifactShelf } from '../link/artifact-shelf.js';
import { ProcessTrees } from '../host/process-trees.js';
import { LeaseSecrets } from '../host/secrets.js';
import type { ReturnChannel } from '../link/return-channel.js';
import type { AttemptStart } from '../link/attempt-start.js';
import type { AgentTool, AttemptContext, AttemptOutcome } from './attempt.js';
import { CallRunner, type CallRunnerDeps } from './call-runner.js';
import { AccessScheduler } from './scheduler.js';

const config = AgentConfig.parse({
  leaseId: 'lse_test',
  rootPrefix: 'sbx:',
  redis: { path: '/run/redis.sock', username: 'agent', password: 'pw' },
  toolUser: { name: 'sbx', uid: 1000, gid: 1000, home: '/home/sbx' },
  workdir: '/workspace',
  env: { LEASE_VAR: 'from-config' },
  spool: { dir: '/tmp/sbx-spool-unused', maxArtifactBytes: 1024, maxTotalBytes: 4096 },
  files: { roots: ['/workspace'], maxFileBytes: 1024 },
  secrets: { grants: [], deliveryKey: null },
});
const keys = leaseKeys(config.rootPrefix, config.leaseId);
const MANIFEST_DIGEST = `sha256:${'a'.repeat(64)}`;
const FINGERPRINT = `sha256:${'f'.repeat(64)}`;

type Sent =
  | { kind: 'result'; callId: string; attemptId: string; result: ToolResult }
  | { kind: 'detached'; callId: string; attemptId: string; result: ToolResult }
  | { kind: 'event'; callId: string; attemptId: string; body: EventBody };

/** The return channel's public surface the runner uses, recording every message in order. */
class FakeReturns implements Pick<ReturnChannel, 'forAttempt' | 'offerArtifact'> {
  readonly sent: Sent[] = [];

  forAttempt(callId: string, attemptId: string): ReturnType<ReturnChannel['forAttempt']> {
    return {
      emit: (body) => void this.sent.push({ kind: 'event', callId, attemptId, body }),
      // Parsed as the control plane would: a result the contract rejects fails the test.
      result: async (result) => void this.sent.push({ kind: 'result', callId, attemptId, result: ToolResult.parse(result) }),
      detached: (result) => void this.sent.push({ kind: 'detached', callId, attemptId, result: ToolResult.parse(result) }),
    };
  }

  offerArtifact(): Promise<void> {
    return Promise.reject(new Error('no artifacts in these tests'));
  }

  results(): Array<Extract<Sent, { kind: 'result' }>> {
    return this.sent.filter((m): m is Extract<Sent, { kind: 'result' }> => m.kind === 'result');
  }
}

/** An outcome as a tool that ran reports it. */
function ranOutcome(over: Partial<AttemptOutcome> = {}): AttemptOutcome {
  const at = new Date();
  return {
    status: 'succeeded',
    error: null,
    commitState: 'committed',
    startedAt: at,
    endedAt: at,
    exit: { code: 0, signal: null, killedBy: null },
    environment: null,
    runner: null,
    outputs: null,
    cleanup: null,
    versions: [],
    data: null,
    stdout: 'ok\n',
    stderr: '',
    truncation: null,
    modelText: 'ok',
    ...over,
  };
}

/** A tool that counts its runs, keeps each attempt's context, and answers with `behaviour`. */
class FakeTool implements AgentTool<Record<string, unknown>> {
  readonly name = 'fake';
  readonly version = '1.0.0';
  runs = 0;
  readonly contexts: AttemptContext[] = [];
  behaviour: (ctx: AttemptContext) => Promise<AttemptOutcome> = async () => ranOutcome();

  parse(args: unknown): Record<string, unknown> {
    const a = args as Record<string, unknown>;
    if (a.bad === true) throw new Error('bad is not allowed');
    return a;
  }

  execute(ctx: AttemptContext): Promise<AttemptOutcome> {
    this.runs += 1;
    this.contexts.push(ctx);
    return this.behaviour(ctx);
  }
}

/** Redis as the runner uses it: the attempt start script (link/attempt-start.ts) over one map. */
class FakeRedis {
  readonly values = new Map<string, string>();
  beginAttempt = async (callId: string, attemptId: string): Promise<AttemptStart> => {
    if (this.values.has(keys.attempt(callId))) return 'attempted';
    if (this.values.has(keys.cancel(callId))) return 'cancelled';
    this.values.set(keys.attempt(callId), attemptId);
    return 'claimed';
  };
}

function job(over: Partial<CallJob> = {}): CallJob {
  return {
    callId: 'call_1',
    tool: 'fake',
    toolVersion: '1.0.0',
    args: {},
    fingerprint: FINGERPRINT,
    manifestDigest: MANIFEST_DIGEST,
    timeoutMs: 5_000,
    maxOutputBytes: 1024,
    accesses: [{ kind: 'all' }],
    ...over,
  };
}

let returns: FakeReturns;
let tool: FakeTool;
let redis: FakeRedis;

async function makeRunner(over: Partial<CallRunnerDeps> = {}): Promise<CallRunner> {
  const cfg = over.config ?? config;
  return new CallRunner({
    config: cfg,
    shell: '/bin/sh',
    scheduler: new AccessScheduler(),
    agentPids: () => new Set(),
    processTrees: new ProcessTrees(),
    openInput: () => ({ close: async () => undefined }),
    publish: () => undefined,
    keys,
    secrets: await LeaseSecrets.load(cfg, async () => null),
    tools: new Map<string, AgentTool<unknown>>([[tool.name, tool as AgentTool<unknown>]]),
    returns,
    shelf: new ArtifactShelf(),
    beginAttempt: redis.beginAttempt,
    log: pino({ level: 'silent' }),
    ...over,
  });
}

beforeEach(() => {
  returns = new FakeReturns();
  tool = new FakeTool();
  redis = new FakeRedis();
});

describe('CallRunner', () => {
  it('runs a fresh call once and sends one result whose receipt names the call, the attempt and the commit state the tool reported', async () => {
    tool.behaviour = async () => ranOutcome({ commitState: 'partial', status: 'failed', exit: { code: 3, signal: null, killedBy: null } });
    const runner = await makeRunner();
    await runner.run(job());

    expect(tool.runs).toBe(1);
    const results = returns.results();
    expect(results).toHaveLength(1);
    const [{ attemptId, result }] = results as [Extract<Sent, { kind: 'result' }>];
    expect(attemptId).toMatch(/^att_/);
    expect(tool.contexts[0]!.attemptId).toBe(attemptId);
    expect(result).toMatchObject({ callId: 'call_1', status: 'failed', exitCode: 3, error: null });
    expect(result.receipt).toMatchObject({
      callId: 'call_1',
      attemptId,
      leaseId: config.leaseId,
      tool: 'fake',
      toolVersion: '1.0.0',
      fingerprint: FINGERPRINT,
      manifestDigest: MANIFEST_DIGEST,
      commitState: 'partial',
    });
    // The durable marker holds this attempt's id, set before the tool ran.
    expect(redis.values.get(keys.attempt('call_1'))).toBe(attemptId);
    expect(runner.activeCount).toBe(0);
  });

  it('reports a redelivered call whose attempt marker exists as effect_unknown and does not run its tool again', async () => {
    redis.values.set(keys.attempt('call_1'), 'att_earlier');
    const runner = await makeRunner();
    await runner.run(job());

    expect(tool.runs).toBe(0);
    const results = returns.results();
    expect(results).toHaveLength(1);
    const { result, attemptId } = results[0]!;
    expect(result.status).toBe('effect_unknown');
    expect(result.error?.code).toBe('execution.effect_unknown');
    expect(result.receipt).toMatchObject({ callId: 'call_1', attemptId, commitState: 'unknown' });
    expect(redis.values.get(keys.attempt('call_1'))).toBe('att_earlier');
  });

  it('reports effect_unknown without running when the attempt start finds the marker taken', async () => {
    // The script's answer when another attempt holds the marker, whatever the map says.
    const runner = await makeRunner({ beginAttempt: async () => 'attempted' });
    await runner.run(job());

    expect(tool.runs).toBe(0);
    expect(returns.results().map((m) => [m.result.status, m.result.receipt?.commitState])).toEqual([['effect_unknown', 'unknown']]);
  });

  it('a failed attempt start (Redis refused it) rejects and leaves the call not running, so the re-read call runs', async () => {
    let refused = false;
    const runner = await makeRunner({
      beginAttempt: async (callId, attemptId) => {
        if (!refused) {
          refused = true;
          throw new Error('LOADING Redis is loading the dataset in memory');
        }
        return redis.beginAttempt(callId, attemptId);
      },
    });
    await expect(runner.run(job())).rejects.toThrow(/LOADING/);
    expect(runner.activeCount).toBe(0);
    expect(tool.runs).toBe(0);

    expect(await runner.run(job())).toBe(true);
    expect(tool.runs).toBe(1);
    expect(returns.results().map((m) => m.result.status)).toEqual(['succeeded']);
  });

  it('neither runs nor answers a call the control plane took back before its attempt began (it answered the call itself)', async () => {
    const runner = await makeRunner({ beginAttempt: async () => 'removed' });
    await runner.run(job());

    expect(tool.runs).toBe(0);
    expect(returns.results()).toEqual([]);
    expect(runner.activeCount).toBe(0);
  });

  it('ends a call whose durable cancel marker exists before it starts as cancelled, not_started, without running its tool or claiming an attempt', async () => {
    redis.values.set(keys.cancel('call_1'), '1');
    const runner = await makeRunner();
    await runner.run(job());

    expect(tool.runs).toBe(0);
    const results = returns.results();
    expect(results).toHaveLength(1);
    expect(results[0]!.result.status).toBe('cancelled');
    expect(results[0]!.result.error?.code).toBe('execution.cancelled');
    expect(results[0]!.result.receipt?.commitState).toBe('not_started');
    expect(redis.values.has(keys.attempt('call_1'))).toBe(false);
  });

  it('gives an unknown tool name a failed result with input.unknown_tool and runs nothing', async () => {
    const runner = await makeRunner();
    await runner.run(job({ tool: 'no_such_tool' }));

    expect(tool.runs).toBe(0);
    const results = returns.results();
    expect(results).toHaveLength(1);
    const { result } = results[0]!;
    expect(result.status).toBe('failed');
    expect(result.error?.code).toBe('input.unknown_tool');
    expect(Object.keys(ERROR_CODES)).toContain(result.error?.code);
    expect(result.receipt?.commitState).toBe('not_started');
    // Nothing began: no attempt marker.
    expect(redis.values.size).toBe(0);
  });

  it('gives arguments the tool cannot parse a failed result with input.invalid and runs nothing', async () => {
    const runner = await makeRunner();
    await runner.run(job({ args: { bad: true } }));

    expect(tool.runs).toBe(0);
    expect(returns.results().map((m) => [m.result.status, m.result.error?.code, m.result.receipt?.commitState])).toEqual([
      ['failed', 'input.invalid', 'not_started'],
    ]);
    expect(redis.values.size).toBe(0);
  });

  it('cancel() of a running call aborts its tool’s cancel signal; the tool’s own outcome is the result', async () => {
    tool.behaviour = (ctx) =>
      new Promise((resolve) => {
        ctx.cancelSignal.addEventListener('abort', () =>
          resolve(ranOutcome({ status: 'cancelled', commitState: 'partial', exit: { code: null, signal: 'SIGKILL', killedBy: 'cancel' } })),
        );
      });
    const runner = await makeRunner();
    const running = runner.run(job());
    await vi.waitFor(() => expect(tool.runs).toBe(1), { timeout: 1_000 });
    expect(runner.activeCount).toBe(1);
    expect(tool.contexts[0]!.cancelSignal.aborted).toBe(false);

    runner.cancel('other_call'); // not this one: nothing happens
    expect(tool.contexts[0]!.cancelSignal.aborted).toBe(false);
    runner.cancel('call_1');
    expect(tool.contexts[0]!.cancelSignal.aborted).toBe(true);
    await running;

    expect(runner.activeCount).toBe(0);
    expect(returns.results().map((m) => [m.result.status, m.result.signal, m.result.receipt?.commitState])).toEqual([
      ['cancelled', 'SIGKILL', 'partial'],
    ]);
  });

  it('ignores a copy of a call it is running now (the running attempt answers) and sends one result', async () => {
    let finish!: () => void;
    tool.behaviour = () => new Promise((resolve) => (finish = () => resolve(ranOutcome())));
    const runner = await makeRunner();
    const first = runner.run(job());
    await vi.waitFor(() => expect(tool.runs).toBe(1), { timeout: 1_000 });
    // The copy returns without an answer of its own, but its run() settles only once it got
    // (and released) its place in the scheduler, i.e. after the running attempt released its own.
    const copy = runner.run(job());
    let copySettled = false;
    void copy.then(() => (copySettled = true));
    await new Promise((r) => setImmediate(r));
    expect(returns.results()).toHaveLength(0);
    expect(copySettled).toBe(false);
    finish();
    await Promise.all([first, copy]);

    expect(tool.runs).toBe(1);
    expect(returns.results()).toHaveLength(1);
  });

  it('ends a call whose tool throws with an effect_unknown result (commit state unknown): a call always ends with a result', async () => {
    tool.behaviour = async () => {
      throw new Error('boom');
    };
    const runner = await makeRunner();
    await runner.run(job());

    expect(tool.runs).toBe(1);
    const results = returns.results();
    expect(results).toHaveLength(1);
    expect(results[0]!.result.status).toBe('effect_unknown');
    expect(results[0]!.result.error?.code).toBe('execution.effect_unknown');
    expect(results[0]!.result.error?.message).toContain('boom');
    expect(results[0]!.result.receipt?.commitState).toBe('unknown');
    expect(runner.activeCount).toBe(0);
  });

  it('sends the events a tool emits, in order, on its attempt, before its result', async () => {
    tool.behaviour = async (ctx) => {
      ctx.emit({ type: 'output', stream: 'stdout', offset: 0, dataBase64: 'YQ==' });
      ctx.emit({ type: 'output', stream: 'stdout', offset: 1, dataBase64: 'Yg==' });
      return ranOutcome();
    };
    const runner = await makeRunner();
    await runner.run(job());

    const attemptId = tool.contexts[0]!.attemptId;
    expect(returns.sent.map((m) => [m.kind, m.attemptId, m.kind === 'event' && m.body.type === 'output' ? m.body.offset : null])).toEqual([
      ['event', attemptId, 0],
      ['event', attemptId, 1],
      ['result', attemptId, null],
    ]);
  });

  it('gives the tool the call’s limits, the tool user and the lease env; proxy variables only with egress', async () => {
    const runner = await makeRunner();
    await runner.run(job({ timeoutMs: 1234, maxOutputBytes: 77 }));
    const ctx = tool.contexts[0]!;
    expect(ctx).toMatchObject({ callId: 'call_1', timeoutMs: 1234, maxOutputBytes: 77, toolUser: config.toolUser });
    expect(ctx.leaseEnv).toEqual({ LEASE_VAR: 'from-config' });
    expect(ctx.networkEnv).toEqual({});

    const egress = AgentConfig.parse({ ...config, egress: { port: 3128, socketPath: '/run/egress.sock' } });
    const withEgress = await makeRunner({ config: egress });
    await withEgress.run(job({ callId: 'call_2' }));
    expect(tool.contexts[1]!.networkEnv).toMatchObject({ HTTP_PROXY: 'http://127.0.0.1:3128', https_proxy: 'http://127.0.0.1:3128' });
    expect(tool.contexts[1]!.networkEnv.NO_PROXY).toContain('127.0.0.1');
    await withEgress.run(job({ callId: 'call_3', egressCredential: 'call_3:tok' })); // in the userinfo: sent as Proxy-Authorization
    expect(tool.contexts[2]!.networkEnv.HTTP_PROXY).toBe('http://call_3:tok@127.0.0.1:3128');
  });

  it('bind() throws on a sandbox that is not pooled; a pooled one binds once, and its calls then get the bound env', async () => {
    const unpooled = await makeRunner();
    const unpooledSecrets = await LeaseSecrets.load(config, async () => null);
    expect(() => unpooled.bind({}, unpooledSecrets)).toThrow(/bound/);

    const pooledConfig = AgentConfig.parse({ ...config, env: {}, pooled: true });
    const pooled = await makeRunner({ config: pooledConfig });
    const secrets = await LeaseSecrets.load(pooledConfig, async () => null);
    pooled.bind({ BOUND: 'yes' }, secrets);
    expect(() => pooled.bind({ AGAIN: 'no' }, secrets)).toThrow(/bound/);
    await pooled.run(job());
    expect(tool.contexts[0]!.leaseEnv).toEqual({ BOUND: 'yes' });
    expect(tool.contexts[0]!.secrets).toBe(secrets);
  });

  it('rejects a job that is not a CallJob before sending anything', async () => {
    const runner = await makeRunner();
    await expect(runner.run({ callId: 'call_1' })).rejects.toThrow();
    expect(returns.sent).toHaveLength(0);
    expect(tool.runs).toBe(0);
  });
});
