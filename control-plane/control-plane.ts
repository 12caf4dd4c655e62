/**
 * Wires a whole control plane from its config: Redis connections, the Docker runtime, the
 * ledger, the queues, the services and the HTTP app, plus the lease reaper. Used by main.ts
 * and by the integration tests, so both run the same assembly.
 */
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { CallService } from './calls/service.js';
import type { Config } from './config.js';
import { buildApp } from './app.js';
import { Ledger } from './ledger/ledger.js';
import { CallNotifier } from './ledger/notifier.js';
import { LeaseService } from './leases/service.js';
import { PolicyStore } from './policies/store.js';
import { LeaseChannels } from './queue/lease-channels.js';
import { connectRedis, redisOptions } from './queue/redis.js';
import { DockerRuntime } from './runtime/docker-runtime.js';

/** Version written to the `sbx.version` label. */
export const SBX_VERSION = '0.1.0';

export interface ControlPlane {
  app: FastifyInstance;
  leases: LeaseService;
  /** Reconciles with the runtime, then expires due leases every `reapIntervalMs`. */
  startBackground(reapIntervalMs?: number): Promise<Awaited<ReturnType<LeaseService['reconcile']>>>;
  /** Stops background work, closes the app and every connection. Sandboxes keep running. */
  close(): Promise<void>;
}

export async function createControlPlane(config: Config, apiKey: string, log: Logger): Promise<ControlPlane> {
  const options = redisOptions(config.redis);
  const redis = connectRedis(options);
  const subscriber = connectRedis(options);
  const runtime = new DockerRuntime(config.dockerSocket);
  const ledger = new Ledger(redis, config.redisPrefix);
  const notifier = await CallNotifier.start(subscriber, ledger.notifyPattern);
  const channels = new LeaseChannels(redis, options, config.redisPrefix, log);
  const policies = await PolicyStore.load(config.policyDir);
  const now = (): Date => new Date();
  const calls = new CallService({ ledger, channels, notifier, now, log });
  const leases = new LeaseService(
    { runtime, ledger, channels, policies, calls, now, log },
    {
      owner: config.owner,
      sbxVersion: SBX_VERSION,
      dataDir: config.dataDir,
      defaultImage: config.image,
      agentRedisSocket: config.agentRedisSocket,
      redisPrefix: config.redisPrefix,
    },
  );
  const app = await buildApp({
    log,
    apiKey,
    leases,
    calls,
    ledger,
    notifier,
    runtime,
    pingRedis: () => redis.ping(),
    spoolDir: join(config.dataDir, 'spool'),
    maxUploadBytes: config.maxUploadBytes,
  });

  let reaper: NodeJS.Timeout | null = null;
  return {
    app,
    leases,
    async startBackground(reapIntervalMs = 1000) {
      const outcome = await leases.reconcile();
      reaper = setInterval(() => {
        leases.expireDue().catch((err: unknown) => log.warn({ err }, 'lease reaper failed'));
      }, reapIntervalMs);
      reaper.unref();
      return outcome;
    },
    async close() {
      if (reaper) clearInterval(reaper);
      await app.close();
      await channels.close();
      await notifier.close();
      redis.disconnect();
    },
  };
}
