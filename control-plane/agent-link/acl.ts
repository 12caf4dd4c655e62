/**
 * The per-lease Redis ACL user a sandbox's agent logs in as (docs/DESIGN.md §5), saved to
 * Redis's ACL file where there is one.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { leaseKeys } from '../../contract/queue.js';

export interface AgentCredentials {
  username: string;
  password: string;
}

export class AgentAcl {
  /** Whether Redis persists ACL users in an ACL file (`aclfile`): then each change is saved to it. */
  private aclFile: Promise<boolean> | null = null;

  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
    private readonly log: Logger,
  ) {}

  /**
   * Creates the lease's ACL user: it may touch only keys and channels of its own namespace, and
   * no dangerous command (CONFIG, ACL, KEYS, FLUSHALL, ...); INFO and CLIENT SETNAME stay
   * because BullMQ uses them. Also denied, because they reach past the namespace: SELECT
   * (other databases), SCAN/RANDOMKEY/DBSIZE (other leases' key names), PUBSUB (their
   * channels), FUNCTION and SCRIPT FLUSH/KILL (server-wide). Redis ACL rules apply in order
   * (https://redis.io/docs/latest/operate/oss_and_stack/management/security/acl/).
   */
  async provision(leaseId: string): Promise<AgentCredentials> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    const username = this.username(leaseId);
    const password = randomBytes(32).toString('hex');
    await this.redis.call(
      'ACL',
      'SETUSER',
      username,
      'reset',
      'on',
      `>${password}`,
      `~${keys.aclPattern}`,
      `&${keys.aclPattern}`,
      '+@all',
      '-@dangerous',
      '-select',
      '-scan',
      '-randomkey',
      '-dbsize',
      '-pubsub',
      '-function',
      '-script|flush',
      '-script|kill',
      '+info',
      '+client|setname',
      '+client|getname',
    );
    await this.save();
    return { username, password };
  }

  /** Deletes the lease's ACL user (idempotent). */
  async remove(leaseId: string): Promise<void> {
    if (((await this.redis.call('ACL', 'DELUSER', this.username(leaseId))) as number) > 0) await this.save();
  }

  /** Lease ids that have an agent ACL user under this prefix (reconcile removes those of ended leases). */
  async leases(): Promise<string[]> {
    const prefix = this.username('');
    return ((await this.redis.call('ACL', 'USERS')) as string[]).filter((u) => u.startsWith(prefix)).map((u) => u.slice(prefix.length));
  }

  /**
   * ACL users are server configuration, not data: AOF does not keep them, so after a Redis
   * restart every agent would fail to log in again. Where Redis has an ACL file
   * (deploy/local/setup.sh configures one) each change is written to it (ACL SAVE), and a
   * restarted Redis loads the agents' users before it accepts connections.
   */
  private async save(): Promise<void> {
    this.aclFile ??= (this.redis.call('CONFIG', 'GET', 'aclfile') as Promise<string[]>).then((reply) => {
      const configured = Boolean(reply[1]);
      if (!configured) this.log.warn('Redis has no aclfile: sandbox agents cannot log in again after a Redis restart');
      return configured;
    });
    if (await this.aclFile) await this.redis.call('ACL', 'SAVE');
  }

  private username(leaseId: string): string {
    return `${this.rootPrefix}agent:${leaseId}`;
  }
}
