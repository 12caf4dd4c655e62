/**
 * The secret store: values encrypted at rest with AES-256-GCM under the installation's secrets
 * key (`SBX_SECRETS_KEY` or `<data dir>/secrets-key`), each bound to its name as additional
 * authenticated data, so a ciphertext copied to another name does not open. The API reads
 * metadata only; `reveal` is for the lease service, which hands values to a sandbox's agent.
 */
import { createHash } from 'node:crypto';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import { open, seal, type Sealed, type SecretMetadata } from '../../contract/secrets.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import type { Principal } from '../http/auth.js';

/** A stored secret: its metadata, the id of the key that sealed it, and the sealed value. */
export interface StoredSecret {
  metadata: SecretMetadata;
  keyId: string;
  sealed: Sealed;
}

/** Where sealed secrets are kept (store.ts: Redis). Implementations never see a value in clear. */
export interface SecretRecords {
  /** Writes a new version (the previous `version` + 1, `createdAt` kept); returns its metadata. */
  put(name: string, record: { keyId: string; sealed: Sealed; sizeBytes: number; updatedBy: string; at: string }): Promise<SecretMetadata>;
  get(name: string): Promise<StoredSecret | null>;
  /** Metadata of every secret, by name. */
  list(): Promise<SecretMetadata[]>;
  /** True when a secret was removed, false when there was none. */
  delete(name: string): Promise<boolean>;
}

export interface SecretServiceDeps {
  records: SecretRecords;
  /** The AES-256 key, 32 bytes. */
  key: Buffer;
  /** Where puts and deletes are recorded (with the metadata's digest; never the value's). */
  audit: Pick<AuditLog, 'record'>;
  now: () => Date;
}

/** Additional data a secret is sealed with in the store: its name. */
function storeAad(name: string): string {
  return `sbx-secret:${name}`;
}

/** Stores, describes, deletes and (for leases only) reveals secrets; the methods an audit log hooks into. */
export class SecretService {
  /** Identifies the key (not derived reversibly from it), so a record sealed under another key is told apart from a damaged one. */
  private readonly keyId: string;

  /** Throws RangeError when `deps.key` is not 32 bytes. */
  constructor(private readonly deps: SecretServiceDeps) {
    if (deps.key.length !== 32) throw new RangeError('the secrets key must be 32 bytes');
    this.keyId = createHash('sha256').update('sbx-secrets-key-id:').update(deps.key).digest('hex').slice(0, 16);
  }

  /**
   * Stores `value` (UTF-8) as the next version of `name` for `by`, and audits it (`secret.put`).
   * Returns the metadata and whether this created the secret. Input is validated by the route.
   */
  async put(name: string, value: string, by: Principal): Promise<{ metadata: SecretMetadata; created: boolean }> {
    const before = await this.deps.records.get(name);
    const plaintext = Buffer.from(value, 'utf8');
    const sealed = seal(this.deps.key, storeAad(name), plaintext);
    plaintext.fill(0);
    const metadata = await this.deps.records.put(name, {
      keyId: this.keyId,
      sealed,
      sizeBytes: Buffer.byteLength(value, 'utf8'),
      updatedBy: by.keyId,
      at: this.deps.now().toISOString(),
    });
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'secret.put',
      target: `secret:${name}`,
      beforeDigest: before ? digestOf(before.metadata) : null,
      afterDigest: digestOf(metadata),
      details: { version: metadata.version },
    });
    return { metadata, created: metadata.version === 1 };
  }

  /** Metadata of `name`. Throws `secret.not_found`. */
  async metadata(name: string): Promise<SecretMetadata> {
    const stored = await this.deps.records.get(name);
    if (!stored) throw notFound(name);
    return stored.metadata;
  }

  /** Metadata of every stored secret, by name. */
  list(): Promise<SecretMetadata[]> {
    return this.deps.records.list();
  }

  /** Removes `name` for `by`, audited (`secret.delete`) when it existed; true then. Removing an absent secret is not an error. */
  async delete(name: string, by: Principal): Promise<boolean> {
    const before = await this.deps.records.get(name);
    const removed = await this.deps.records.delete(name);
    if (removed) {
      await this.deps.audit.record({
        actor: actorOf(by),
        action: 'secret.delete',
        target: `secret:${name}`,
        beforeDigest: before ? digestOf(before.metadata) : null,
        afterDigest: null,
        details: {},
      });
    }
    return removed;
  }

  /**
   * The values of `names` in clear, for delivery into a sandbox. Throws `secret.not_found`
   * (details.name) for the first missing one, `secret.unreadable` when one was sealed under
   * another key or does not authenticate.
   */
  async reveal(names: readonly string[]): Promise<Map<string, Buffer>> {
    const values = new Map<string, Buffer>();
    for (const name of names) {
      const stored = await this.deps.records.get(name);
      if (!stored) throw notFound(name);
      if (stored.keyId !== this.keyId) {
        throw new AppError('secret.unreadable', `secret ${name} was stored under another secrets key; store it again`, {
          details: { name },
        });
      }
      try {
        values.set(name, open(this.deps.key, storeAad(name), stored.sealed));
      } catch (err) {
        throw new AppError('secret.unreadable', `secret ${name} does not decrypt (its record was altered); store it again`, {
          details: { name },
          cause: err,
        });
      }
    }
    return values;
  }
}

function notFound(name: string): AppError {
  return new AppError('secret.not_found', `no secret named ${name}`, { details: { name } });
}
