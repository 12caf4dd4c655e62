/**
 * Policy versions in Redis. `<prefix>policies` (hash: name → head JSON: latest version, its
 * digest, tombstone) and `<prefix>policy-versions:<name>` (hash: version → version record JSON).
 * Versions are never rewritten or removed; a delete only marks the head. Every write is a
 * compare-and-swap on the head, so two writers (two control planes, two admins) cannot both
 * take the same version number.
 */
import type { Redis } from 'ioredis';
import { ParsedTexts } from '../redis/parsed-texts.js';
import { PolicyHead, PolicyVersion } from './schema.js';

// Writes the head (and a version record) only if the head is still what the caller read.
const SWAP_HEAD = `
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[2], ARGV[5], ARGV[4]) end
return 1`;

/** A head as read, with the exact text a later `swap` compares against. */
export interface ReadHead {
  head: PolicyHead;
  raw: string;
}

/** Policy versions whose parsed record a store keeps. */
const PARSED_VERSIONS_MAX = 1024;

export class RedisPolicyStore {
  /**
   * Versions parsed once per stored text (every lease create reads its policy's version, and
   * its schema parse is most of that read's CPU): versions are never rewritten, so this is one
   * parse per version; the text still decides, as another store's data under the prefix would.
   */
  private readonly parsedVersions = new ParsedTexts<PolicyVersion>((raw) => PolicyVersion.parse(JSON.parse(raw)), PARSED_VERSIONS_MAX);

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    heads: () => `${this.prefix}policies`,
    versions: (name: string) => `${this.prefix}policy-versions:${name}`,
  };

  async head(name: string): Promise<ReadHead | null> {
    const raw = await this.redis.hget(this.k.heads(), name);
    return raw === null ? null : { head: PolicyHead.parse(JSON.parse(raw)), raw };
  }

  /** Every head, deleted ones included. */
  async heads(): Promise<PolicyHead[]> {
    return (await this.redis.hvals(this.k.heads())).map((raw) => PolicyHead.parse(JSON.parse(raw)));
  }

  /** Version `version` of `name`, deep-frozen (shared between readers); null when there is none. */
  async version(name: string, version: number): Promise<PolicyVersion | null> {
    const raw = await this.redis.hget(this.k.versions(name), String(version));
    return raw === null ? null : this.parsedVersions.read(`${name}@${version}`, raw);
  }

  /** Every version of `name`, oldest first. */
  async versions(name: string): Promise<PolicyVersion[]> {
    const all = (await this.redis.hvals(this.k.versions(name))).map((raw) => PolicyVersion.parse(JSON.parse(raw)));
    return all.sort((a, b) => a.version - b.version);
  }

  /**
   * Sets `next` as the head of its policy (and stores `record`, a new version) if the head is
   * still `expected` (null: there was none). Returns false, writing nothing, when it is not.
   */
  async swap(expected: ReadHead | null, next: PolicyHead, record?: PolicyVersion): Promise<boolean> {
    const done = await this.redis.eval(
      SWAP_HEAD,
      2,
      this.k.heads(),
      this.k.versions(next.name),
      next.name,
      expected?.raw ?? '',
      JSON.stringify(next),
      record ? JSON.stringify(record) : '',
      record ? String(record.version) : '',
    );
    return done === 1;
  }
}
