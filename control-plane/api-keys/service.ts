/**
 * API keys: created by admins with a role and a tenant, shown in clear once, stored as their
 * sha256 only; revoked keys fail authentication from the next request on (no cache).
 */
import { randomBytes } from 'node:crypto';
import { digestOf } from '../../contract/digest.js';
import { AppError } from '../../contract/errors.js';
import { actorOf, type AuditLog } from '../audit/service.js';
import { keyDigest, type Principal } from '../http/auth.js';
import type { ApiKey, ApiKeyRecord, CreateApiKeyBody } from './schema.js';
import type { RedisApiKeyStore } from './store.js';

export interface ApiKeyServiceDeps {
  store: Pick<RedisApiKeyStore, 'insert' | 'get' | 'byDigest' | 'list' | 'revoke'>;
  audit: Pick<AuditLog, 'record'>;
  now: () => Date;
}

/** The metadata of a record (its digest stays inside). */
function view({ sha256: _sha256, ...key }: ApiKeyRecord): ApiKey {
  return key;
}

export class ApiKeyService {
  constructor(private readonly deps: ApiKeyServiceDeps) {}

  /**
   * Creates a key for `body.tenant` with `body.role`. Returns its metadata and `secret`
   * (`sbx_` + 43 base64url characters, 256 bits), which is not stored and cannot be shown again.
   */
  async create(body: CreateApiKeyBody, by: Principal): Promise<ApiKey & { secret: string }> {
    const secret = `sbx_${randomBytes(32).toString('base64url')}`;
    const record: ApiKeyRecord = {
      id: `key_${randomBytes(10).toString('hex')}`,
      ...body,
      createdAt: this.deps.now().toISOString(),
      createdBy: by.keyId,
      revokedAt: null,
      revokedBy: null,
      sha256: keyDigest(secret),
    };
    await this.deps.store.insert(record);
    const key = view(record);
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'api_key.create',
      target: `api_key:${key.id}`,
      beforeDigest: null,
      afterDigest: digestOf(key),
      details: { name: key.name, role: key.role, tenant: key.tenant },
    });
    return { ...key, secret };
  }

  /** Every key's metadata, revoked ones included, oldest first. */
  async list(): Promise<ApiKey[]> {
    return (await this.deps.store.list()).map(view).sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  /**
   * Revokes key `id`: requests with it fail `auth.invalid_api_key` from now on. Revoking a
   * revoked key returns it unchanged (and is not audited again). Throws `key.not_found`.
   */
  async revoke(id: string, by: Principal): Promise<ApiKey> {
    const record = await this.deps.store.get(id);
    if (!record) throw new AppError('key.not_found', `no API key ${id}`, { details: { id } });
    if (record.revokedAt !== null) return view(record);
    const revoked: ApiKeyRecord = { ...record, revokedAt: this.deps.now().toISOString(), revokedBy: by.keyId };
    await this.deps.store.revoke(revoked);
    await this.deps.audit.record({
      actor: actorOf(by),
      action: 'api_key.revoke',
      target: `api_key:${id}`,
      beforeDigest: digestOf(view(record)),
      afterDigest: null,
      details: { name: record.name, role: record.role, tenant: record.tenant },
    });
    return view(revoked);
  }

  /** The principal of the live key whose secret has hex sha256 `sha256`; undefined for unknown or revoked keys. */
  async lookup(sha256: string): Promise<Principal | undefined> {
    const record = await this.deps.store.byDigest(sha256);
    return record ? { keyId: record.id, role: record.role, tenant: record.tenant } : undefined;
  }
}
