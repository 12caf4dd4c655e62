/**
 * The runtime driver settings (`SBX_RUNTIME` and the Kubernetes driver's `SBX_K8S_*`), parsed by
 * config.ts. Which driver runs every sandbox of a control plane; nothing above the runtime port
 * (runtime.ts) depends on the choice.
 */
import { z } from 'zod';

/** `docker`: containers on one Docker engine (docker-runtime.ts); `kubernetes`: a Pod per sandbox (kubernetes-runtime.ts). */
export const RuntimeKind = z.enum(['docker', 'kubernetes']);
export type RuntimeKind = z.infer<typeof RuntimeKind>;

/** `k=v` pairs, comma-separated, as a map. */
const LabelPairs = z
  .string()
  .default('')
  .transform((text, ctx) => {
    const pairs: Record<string, string> = {};
    for (const item of text
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)) {
      const eq = item.indexOf('=');
      if (eq <= 0) {
        ctx.addIssue({ code: 'custom', message: `"${item}" is not key=value` });
        return z.NEVER;
      }
      pairs[item.slice(0, eq)] = item.slice(eq + 1);
    }
    return pairs;
  });

/** The Kubernetes driver's settings, as environment variables. */
export const KubernetesEnv = z.object({
  /** A kubeconfig file; unset: the control plane's own service account (in a cluster). */
  SBX_K8S_KUBECONFIG: z.string().optional(),
  /** The namespace of sandbox Pods. Default `sbx-sandboxes`. */
  SBX_K8S_NAMESPACE: z.string().default('sbx-sandboxes'),
  /** How nodes get sandbox images. Default `IfNotPresent`. */
  SBX_K8S_IMAGE_PULL_POLICY: z.enum(['IfNotPresent', 'Always', 'Never']).default('IfNotPresent'),
  /** Node labels (`k=v,…`) every sandbox Pod requires besides `sbx.runtime`: e.g. the label of the nodes with a loopback-only CNI. */
  SBX_K8S_NODE_SELECTOR: LabelPairs,
  /**
   * RuntimeClasses the cluster offers for a policy's `runtime.oci` (`runsc=gvisor`): a sandbox of
   * that runtime names the class (`runtimeClassName`), whose handler and scheduling then place and
   * run it, instead of being placed on nodes labelled `sbx.runtime=<oci>`. Unset: node labels.
   */
  SBX_K8S_RUNTIME_CLASSES: LabelPairs.pipe(
    z.partialRecord(
      z.enum(['runc', 'runsc']),
      z.string().regex(/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/, 'a RuntimeClass name (DNS subdomain)'),
    ),
  ),
  /** Registries (`host:port`, comma-separated) whose image configs are read over plain HTTP (a lab's). */
  SBX_K8S_PLAIN_HTTP_REGISTRIES: z
    .string()
    .default('')
    .transform((s) =>
      s
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean),
    ),
  /**
   * The share of a sandbox's CPU limit its Pod requests (what the scheduler reserves on a node),
   * 0 < x ≤ 1. Default 0.25: CPU is shared when idle, as on the Docker driver, where nothing is
   * reserved. Memory is requested whole: it cannot be taken back without killing.
   */
  SBX_K8S_CPU_REQUEST_FRACTION: z.coerce.number().gt(0).max(1).default(0.25),
  /**
   * The pids limit per container the sandbox nodes enforce (their runtime's or kubelet's
   * setting), declared by the admin: what the driver takes where a sandbox cannot see its own
   * limit (gVisor shows no cgroups). Unset: such sandboxes are refused (`policy.unenforceable`).
   */
  SBX_K8S_NODE_PIDS_LIMIT: z.coerce.number().int().positive().optional(),
  /** How long a sandbox Pod may take from create to a running agent, ms. Default 120 000. */
  SBX_K8S_START_TIMEOUT_MS: z.coerce.number().int().positive().default(120_000),
  /** How long a sandbox stays on a node that stopped answering before Kubernetes evicts it, s. Default 10. */
  SBX_K8S_NODE_LOST_AFTER_SECONDS: z.coerce.number().int().min(0).default(10),
});

/** The Kubernetes driver's settings, parsed. */
export interface KubernetesSettings {
  kubeconfigPath: string | null;
  namespace: string;
  imagePullPolicy: 'IfNotPresent' | 'Always' | 'Never';
  nodeSelector: Record<string, string>;
  runtimeClasses: Partial<Record<'runc' | 'runsc', string>>;
  plainHttpRegistries: string[];
  startTimeoutMs: number;
  nodeLostAfterSeconds: number;
  cpuRequestFraction: number;
  nodePidsLimit: number | null;
}

/** KubernetesEnv's result as settings. */
export function kubernetesSettings(e: z.infer<typeof KubernetesEnv>): KubernetesSettings {
  return {
    kubeconfigPath: e.SBX_K8S_KUBECONFIG ?? null,
    namespace: e.SBX_K8S_NAMESPACE,
    imagePullPolicy: e.SBX_K8S_IMAGE_PULL_POLICY,
    nodeSelector: e.SBX_K8S_NODE_SELECTOR,
    runtimeClasses: e.SBX_K8S_RUNTIME_CLASSES,
    plainHttpRegistries: e.SBX_K8S_PLAIN_HTTP_REGISTRIES,
    startTimeoutMs: e.SBX_K8S_START_TIMEOUT_MS,
    nodeLostAfterSeconds: e.SBX_K8S_NODE_LOST_AFTER_SECONDS,
    cpuRequestFraction: e.SBX_K8S_CPU_REQUEST_FRACTION,
    nodePidsLimit: e.SBX_K8S_NODE_PIDS_LIMIT ?? null,
  };
}

/** Whether `value` may be a Kubernetes label value (at most 63 characters, alphanumeric at both ends). */
export function isLabelValue(value: string): boolean {
  return value.length <= 63 && /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/.test(value);
}
