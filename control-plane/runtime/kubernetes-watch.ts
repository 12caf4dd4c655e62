/**
 * What the Kubernetes driver knows of its Pods between API calls: one informer (list, then
 * watch, relisting after a break; @kubernetes/client-node's) over the sandbox namespace's Pods
 * that carry `sbx.lease`, and waiters woken by every change of the Pod they wait on. One watch
 * connection serves every lease of the process, where a poll per lease would cost a request per
 * lease per interval.
 */
import { CoreV1Api, makeInformer, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { LABEL } from './runtime.js';

/** How long after an informer error it starts again, ms. */
const RESTART_AFTER_MS = 1000;

export class PodWatch {
  private readonly informer;
  private readonly waiters = new Map<string, Set<() => void>>();
  private started: Promise<void> | null = null;
  private stopped = false;

  constructor(
    kubeConfig: KubeConfig,
    private readonly namespace: string,
    private readonly log: Pick<Logger, 'warn'>,
  ) {
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const selector = LABEL.lease;
    this.informer = makeInformer<V1Pod>(
      kubeConfig,
      `/api/v1/namespaces/${namespace}/pods`,
      () => core.listNamespacedPod({ namespace, labelSelector: selector }),
      selector,
    );
    const wake = (pod: V1Pod): void => this.wake(pod.metadata?.name ?? '');
    this.informer.on('add', wake);
    this.informer.on('update', wake);
    this.informer.on('delete', wake);
    this.informer.on('error', (err: unknown) => {
      if (this.stopped) return;
      this.log.warn({ err }, 'kubernetes pod watch broke; starting it again');
      // Waiters re-read what they wait on once it runs again (a relist may have missed nothing or everything).
      setTimeout(() => {
        if (!this.stopped)
          void this.informer.start().then(
            () => this.wakeAll(),
            () => undefined,
          );
      }, RESTART_AFTER_MS).unref();
    });
  }

  /** Starts the informer once (its first list done); later calls share the first. */
  start(): Promise<void> {
    this.started ??= this.informer.start();
    return this.started;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.informer.stop();
    this.wakeAll();
  }

  /** The Pod `name` as last seen, or undefined when absent. */
  get(name: string): V1Pod | undefined {
    return this.informer.get(name, this.namespace);
  }

  /**
   * Resolves with what `test` returns for Pod `name` (undefined when absent) once it is not
   * undefined; rejects with `timeoutError()` after `timeoutMs`, or with the signal's reason.
   */
  async until<T>(name: string, test: (pod: V1Pod | undefined) => T | undefined, timeoutMs: number, signal?: AbortSignal): Promise<T> {
    // The first list counts against the timeout too: an API server that never answers must not hang the caller.
    const deadline = Date.now() + timeoutMs;
    let listTimer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.start(),
      new Promise<never>((_, reject) => {
        listTimer = setTimeout(() => reject(new Error(`pod ${name}: the pod list did not answer within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]).finally(() => clearTimeout(listTimer));
    timeoutMs = Math.max(0, deadline - Date.now());
    return new Promise<T>((resolve, reject) => {
      let set = this.waiters.get(name);
      if (!set) this.waiters.set(name, (set = new Set()));
      const waiters = set;
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        waiters.delete(check);
        if (waiters.size === 0) this.waiters.delete(name);
      };
      const check = (): void => {
        let value: T | undefined;
        try {
          value = test(this.get(name));
        } catch (err) {
          done();
          reject(err as Error);
          return;
        }
        if (value !== undefined) {
          done();
          resolve(value);
        } else if (this.stopped) {
          done();
          reject(new Error('the pod watch stopped'));
        }
      };
      const aborted = (): void => {
        done();
        reject(signal?.reason as Error);
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`pod ${name}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      waiters.add(check);
      signal?.addEventListener('abort', aborted, { once: true });
      if (signal?.aborted) aborted();
      else check();
    });
  }

  private wake(name: string): void {
    for (const check of [...(this.waiters.get(name) ?? [])]) check();
  }

  private wakeAll(): void {
    for (const name of [...this.waiters.keys()]) this.wake(name);
  }
}
