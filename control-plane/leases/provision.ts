/**
 * Agent provisioning: the lease's ACL user and agent config file, its secret values sealed for
 * its agent alone, the container started and its agent's hello awaited; for a pooled sandbox,
 * the binding to its lease. Also `attach`: this process consumes the lease's returns (unless a
 * live one does) and serves its egress proxy.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { AppError } from '../../contract/errors.js';
import { LINK_REDIS_SOCKET, LINK_SOCKET, linkToken } from '../../contract/link.js';
import type { AgentConfig, AgentHello, SecretGrant } from '../../contract/queue.js';
import { digestOf } from '../../contract/digest.js';
import { deliveryAad, seal, type SecretDelivery } from '../../contract/secrets.js';
import type { AgentAcl } from '../agent-link/acl.js';
import type { Handshake, ImageFactsScope } from '../agent-link/handshake.js';
import type { ReturnsIn } from '../agent-link/returns-in.js';
import type { CredentialInjection } from '../egress/credentials.js';
import type { EgressProxy } from '../egress/proxy.js';
import { AGENT_RUNTIME_DIR } from '../../contract/agent-runtime.js';
import { agentEgress, AGENT_REDIS_DIR, AGENT_SPOOL_DIR, EGRESS_SOCKET_NAME } from '../policies/compiler.js';
import type { Policy } from '../policies/schema.js';
import type { Launched } from '../pools/schema.js';
import { agentExitedError, type SandboxRuntime } from '../runtime/runtime.js';
import { BootGate } from './boot-gate.js';
import { leaseDirs, type AgentRelay, type LeasePlan } from './plan.js';

/** The tools' default cwd when the image sets no `WorkingDir`. */
const DEFAULT_WORKDIR = '/workspace';

/** How long a claimed pooled sandbox may take to acknowledge its binding, ms. */
const BIND_TIMEOUT_MS = 5000;

export interface ProvisionerDeps {
  runtime: Pick<SandboxRuntime, 'start' | 'exited'>;
  acl: Pick<AgentAcl, 'provision'>;
  handshake: Pick<Handshake, 'awaitHello' | 'bind' | 'leaveSecretDelivery' | 'knownImageFacts' | 'keepImageFacts'>;
  returns: Pick<ReturnsIn, 'start'>;
  /** Serves the egress proxy of leases whose policy network mode is `allowlist`. */
  egress: Pick<EgressProxy, 'serve' | 'update' | 'basisOf'>;
  /** The lease CA before the sandbox starts, and what its egress proxy intercepts (policy `secrets.inject`). */
  credentials: Pick<CredentialInjection, 'prepare' | 'interception' | 'placeholder'>;
}

export interface ProvisionerOptions {
  dataDir: string;
  /** Host path of the Redis unix socket agents connect to. */
  agentRedisSocket: string;
  redisPrefix: string;
  /** How long a new sandbox's agent has to report ready, ms. Default 30 000. */
  helloTimeoutMs?: number;
  /** The node relay, where sandboxes reach the control plane through one (plan.ts). */
  agentRelay?: AgentRelay;
  /** Admits sandbox boots (boot-gate.ts). Default: every boot at once. */
  bootGate?: BootGate;
}

export class Provisioner {
  private readonly gate: BootGate;

  constructor(
    private readonly deps: ProvisionerDeps,
    private readonly options: ProvisionerOptions,
  ) {
    this.gate = options.bootGate ?? new BootGate(0);
  }

  /**
   * Starts the container of `id` from `plan` for a lease create and waits for its agent's hello,
   * once a boot slot is free (boot-gate.ts): everything from the agent's credentials and the
   * secrets' delivery (whose expiry counts from it) to the hello happens within the slot.
   * Throws `lease.create_failed` (the agent died or never said hello) and runtime errors; what
   * it made is the caller's to tear down.
   */
  launch(id: string, plan: LeasePlan): Promise<Launched> {
    return this.gate.run(() => this.launchNow(id, plan, false));
  }

  /**
   * As `launch`, for a warm pool: the agent starts without the lease's env and secrets, to be
   * bound later (`bind`). Null, with nothing made, when no boot slot is spare (lease creates go
   * first; the pool tries again next round).
   */
  launchPooled(id: string, plan: LeasePlan): Promise<Launched | null> {
    return this.gate.tryRun(() => this.launchNow(id, plan, true));
  }

  private async launchNow(id: string, plan: LeasePlan, pooled: boolean): Promise<Launched> {
    const credsPath = join(leaseDirs(this.options.dataDir, id).credentials, 'agent.json');
    const creds = await this.deps.acl.provision(id);
    const deliveryKey = !pooled && plan.grants.length > 0 ? await this.deliverSecrets(id, plan.grants, plan.values) : null;
    const factsScope = imageFactsScope(plan);
    const imageFacts = factsScope === null ? null : await this.deps.handshake.knownImageFacts(factsScope);
    const relay = this.options.agentRelay;
    const agentConfig: AgentConfig = {
      leaseId: id,
      rootPrefix: this.options.redisPrefix,
      redis: { path: relay ? LINK_REDIS_SOCKET : `${AGENT_REDIS_DIR}/${this.options.agentRedisSocket.split('/').pop()}`, ...creds },
      link: relay ? { path: LINK_SOCKET, token: linkToken(relay.key, id) } : null,
      toolUser: plan.toolUser,
      workdir: plan.imageConfig.workingDir ?? DEFAULT_WORKDIR,
      imageEnv: plan.imageConfig.env,
      env: pooled ? {} : plan.env,
      files: { roots: plan.policy.filesystem.writableRoots.map((r) => r.path), maxFileBytes: plan.policy.tools.files.maxFileBytes },
      spool: {
        dir: AGENT_SPOOL_DIR,
        maxArtifactBytes: plan.policy.tools.exec.maxArtifactBytes,
        maxTotalBytes: plan.policy.tools.exec.maxSpoolBytes,
      },
      egress: agentEgress(plan.policy),
      secrets: { grants: pooled ? [] : plan.grants, deliveryKey },
      pooled,
      imageFacts,
    };
    await mkdir(dirname(credsPath), { recursive: true, mode: 0o700 });
    // Mounted into the sandbox (a bind source must exist); the control planes bind their preview sockets there.
    await mkdir(leaseDirs(this.options.dataDir, id).previews, { recursive: true, mode: 0o700 });
    await writeFile(credsPath, JSON.stringify(agentConfig), { mode: 0o400 });
    // The CA's trust files are mounted into the sandbox: they exist before it starts.
    await this.deps.credentials.prepare(id, plan.policy, leaseDirs(this.options.dataDir, id));
    await this.attach(id, plan.policy, pooled ? [] : plan.grants);
    const { containerId, seededPaths, hello } = await this.boot(id, plan);
    // The agent holds its credentials now; removing the file keeps them out of reach of
    // anything that reads the sandbox's filesystem later (files API included).
    await rm(credsPath, { force: true });
    if (factsScope !== null && imageFacts === null) await this.deps.handshake.keepImageFacts(factsScope, hello.facts);
    return { containerId, facts: hello.facts, seededPaths };
  }

  /** Starts the container of `id` and waits for its agent's hello. */
  private async boot(id: string, plan: LeasePlan): Promise<{ containerId: string; seededPaths: string[]; hello: AgentHello }> {
    const { runtime } = this.deps;
    const { containerId, seededPaths } = await runtime.start(plan.spec);
    // The agent says hello, or its container stops first (a crashed agent: fail now, with its
    // last words, rather than after the hello timeout).
    const helloArrived = new AbortController();
    const died = runtime.exited(id, helloArrived.signal).then(({ exitCode, logTail }) => {
      if (helloArrived.signal.aborted) return undefined as never;
      throw agentExitedError(exitCode, logTail);
    });
    died.catch(() => undefined);
    const hello = await Promise.race([this.deps.handshake.awaitHello(id, this.helloTimeoutMs), died]).finally(() => helloArrived.abort());
    return { containerId, seededPaths, hello };
  }

  /**
   * Gives a claimed pooled sandbox its lease's env and secrets (a `bind` inbox entry, acknowledged on
   * `bound`). Throws `lease.create_failed` when the agent does not take it in BIND_TIMEOUT_MS.
   */
  async bind(id: string, plan: LeasePlan): Promise<void> {
    // The process that filled the pool may be gone: whoever consumes the returns serves egress.
    await this.attach(id, plan.policy, plan.grants);
    const deliveryKey = plan.grants.length > 0 ? await this.deliverSecrets(id, plan.grants, plan.values) : null;
    // A ready agent takes its binding in milliseconds; one that does not in time is not waited
    // for longer (the lease starts cold instead).
    const ack = await this.deps.handshake.bind(id, { env: plan.env, secrets: { grants: plan.grants, deliveryKey } }, BIND_TIMEOUT_MS);
    if (!ack.ok)
      throw new AppError('lease.create_failed', `the pooled sandbox did not take its lease: ${ack.error}`, { details: { sandboxId: id } });
  }

  /**
   * Consumes the lease's returns in this process unless a live one does (the consumer lock);
   * the process that consumes them also serves the lease's egress proxy, intercepting what
   * the policy injects of `grants` (the lease's granted secrets).
   */
  async attach(id: string, policy: Policy, grants: readonly SecretGrant[]): Promise<void> {
    if (!(await this.deps.returns.start(id))) return;
    if (policy.network.mode !== 'allowlist') return;
    // What the proxy is made from: when the record changed (a live policy change, a phase move,
    // a pooled sandbox bound, on this process or another), the proxy follows, cutting what it let through.
    const basis = digestOf({ network: policy.network, secrets: policy.secrets, grants: grants.map((g) => g.name) });
    const served = this.deps.egress.basisOf(id);
    if (served === basis) return;
    const dirs = leaseDirs(this.options.dataDir, id);
    const interception = await this.deps.credentials.interception(id, policy, grants, dirs);
    if (served === null) await this.deps.egress.serve(id, policy.network.allow, join(dirs.egress, EGRESS_SOCKET_NAME), interception, basis);
    else this.deps.egress.update(id, policy.network.allow, interception, basis);
  }

  private get helloTimeoutMs(): number {
    return this.options.helloTimeoutMs ?? 30_000;
  }

  /**
   * Leaves the granted values for the lease's agent in its namespace, each sealed (AES-256-GCM)
   * under a fresh key of this lease alone, bound to the lease and the name. The key goes in the
   * agent's config file, so the values never lie in clear on disk or in Redis; the agent takes
   * them once, and they expire by themselves if it never does. Zeroes the key afterwards (best
   * effort; the create zeroes the values once the lease is made or has failed).
   * Returns the key, base64.
   */
  private async deliverSecrets(leaseId: string, grants: readonly SecretGrant[], values: Map<string, Buffer>): Promise<string> {
    const key = randomBytes(32);
    try {
      const delivery: SecretDelivery = {
        // A granted secret with no value is one the egress proxy injects: the sandbox holds its placeholder.
        items: grants.map((g) => ({
          name: g.name,
          sealed: seal(
            key,
            deliveryAad(leaseId, g.name),
            values.get(g.name) ?? Buffer.from(this.deps.credentials.placeholder(leaseId, g.name)),
          ),
        })),
      };
      await this.deps.handshake.leaveSecretDelivery(leaseId, delivery, this.helloTimeoutMs + 30_000);
      return key.toString('base64');
    } finally {
      key.fill(0);
    }
  }
}

/**
 * Where an earlier agent's image facts hold for this sandbox too: only where nothing but the image
 * and the agent runtime can put programs on the tools' PATH — no read-only mounts of the policy,
 * no volumes. Null: its agent measures.
 */
function imageFactsScope(plan: LeasePlan): ImageFactsScope | null {
  const runtime = plan.spec.readOnlyBinds.find((b) => b.containerPath === AGENT_RUNTIME_DIR);
  if (runtime === undefined || plan.policy.filesystem.readOnlyMounts.length > 0 || (plan.spec.volumeBinds?.length ?? 0) > 0) return null;
  return { agentRuntimeDir: runtime.hostPath, imageId: plan.imageConfig.id, toolUser: plan.toolUser };
}
