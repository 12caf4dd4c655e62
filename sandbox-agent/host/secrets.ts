/**
 * The lease's secrets inside the agent: their values (taken once from the lease's namespace and
 * decrypted with the key in the agent's config), the redaction every call's output goes
 * through, and delivery to the calls that ask — env vars of that call's process, and files in
 * the secrets tmpfs that exist only while such a call runs.
 */
import { chmod, rm, writeFile } from 'node:fs/promises';
import { errorInfo, type ErrorInfo } from '../../contract/errors.js';
import type { AgentConfig, SecretGrant } from '../../contract/queue.js';
import { open, SecretDelivery, deliveryAad } from '../../contract/secrets.js';
import { Redaction } from '../output/redactor.js';

/** What a call gets for the secrets it asked for; `release` must run once the call's processes are gone. */
export interface ProvidedSecrets {
  /** Variables to add to the process environment. */
  env: Record<string, string>;
  /** The names delivered, sorted (the receipt's `secretsUsed`). */
  names: string[];
  /** Removes the call's secret files (unless a running call still holds them). */
  release(): Promise<void>;
}

/** One lease's secrets in its agent: load once at start, then `redaction` for all output and `provide` per call. */
export class LeaseSecrets {
  /** Redacts every value of the lease; applied to the output of every call, asked or not. */
  readonly redaction: Redaction;
  /** Each secret file present now: how many running calls hold it (background tasks may overlap) and its write. */
  private readonly files = new Map<string, { holders: number; written: Promise<void> }>();

  private constructor(private readonly grants: ReadonlyMap<string, { grant: SecretGrant; value: Buffer }>) {
    this.redaction = new Redaction([...grants.values()].map(({ grant, value }) => ({ name: grant.name, value })));
  }

  /**
   * Takes the lease's sealed values (`take`: GETDEL of `LeaseKeys.secrets`, so they are in
   * Redis no longer) and opens them. Throws Error when grants exist but the delivery is missing,
   * malformed, or lacks or fails to authenticate a granted value: the agent then stops before
   * saying hello, and the lease fails rather than run without the secrets it was promised.
   */
  static async load(config: AgentConfig, take: () => Promise<string | null>): Promise<LeaseSecrets> {
    const { grants, deliveryKey } = config.secrets;
    if (grants.length === 0) return new LeaseSecrets(new Map());
    if (deliveryKey === null) throw new Error('secrets were granted without a delivery key');
    const text = await take();
    if (text === null) throw new Error('the secrets delivery is missing (expired or taken)');
    const delivery = SecretDelivery.parse(JSON.parse(text));
    const key = Buffer.from(deliveryKey, 'base64');
    const values = new Map<string, { grant: SecretGrant; value: Buffer }>();
    for (const grant of grants) {
      const item = delivery.items.find((i) => i.name === grant.name);
      if (!item) throw new Error(`the secrets delivery lacks ${grant.name}`);
      values.set(grant.name, { grant, value: open(key, deliveryAad(config.leaseId, grant.name), item.sealed) });
    }
    key.fill(0);
    return new LeaseSecrets(values);
  }

  /**
   * Delivers `names` to one call: their env vars, and their files written (mode 0440; the
   * secrets tmpfs gives them the tool user's group). Returns `policy.secret_denied` for a name
   * the lease was not granted (the control plane refuses those first; this is the agent's own
   * check) and nothing is delivered.
   */
  async provide(names: readonly string[]): Promise<ProvidedSecrets | ErrorInfo> {
    const chosen: Array<{ grant: SecretGrant; value: Buffer }> = [];
    for (const name of names) {
      const entry = this.grants.get(name);
      if (!entry) return errorInfo('policy.secret_denied', `secret ${name} was not granted to this sandbox`, { name });
      chosen.push(entry);
    }
    const env: Record<string, string> = {};
    const files: string[] = [];
    const release = async (): Promise<void> => {
      for (const file of files.splice(0)) {
        const entry = this.files.get(file);
        if (entry && --entry.holders > 0) continue;
        this.files.delete(file);
        await rm(file, { force: true });
      }
    };
    try {
      for (const { grant, value } of chosen) {
        if (grant.env !== null) env[grant.env] = value.toString('utf8');
        if (grant.file === null) continue;
        let entry = this.files.get(grant.file);
        if (!entry) {
          entry = { holders: 0, written: writeSecretFile(grant.file, value) };
          this.files.set(grant.file, entry);
        }
        entry.holders += 1;
        files.push(grant.file);
        await entry.written;
      }
    } catch (err) {
      await release();
      throw err;
    }
    return { env, names: [...names].sort(), release };
  }
}

/** Writes a secret file afresh: root-owned, mode 0440, group from the setgid secrets tmpfs. */
async function writeSecretFile(path: string, value: Buffer): Promise<void> {
  await rm(path, { force: true });
  await writeFile(path, value, { mode: 0o440, flag: 'wx' });
  // The mode given at creation is cut by the umask; this one is exact.
  await chmod(path, 0o440);
}
