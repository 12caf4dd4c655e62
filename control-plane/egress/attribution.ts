/**
 * Which call a connection through the egress proxy belongs to. The socket a connection arrives
 * on names its lease (proxy.ts); the call is named by the proxy credential the agent gives each
 * call's processes in their proxy variables (`HTTP_PROXY=http://<callId>:<token>@127.0.0.1:3128`),
 * which curl, git, pip, Python's urllib, npm and Node's fetch send as `Proxy-Authorization: Basic`.
 * The token is an HMAC of the lease and call ids under a key every control plane of an
 * installation derives from the secrets key, so no credential is made up from a call id; but
 * every call of a lease runs as one tool user, who can read another call's credential from its
 * environment: within a lease the call is what a request claims (documented in policies/README.md).
 * A connection without a valid credential is the lease's, attributed to no call.
 */
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';

/** Characters of the token: 32 base64url characters, 192 bits. */
const TOKEN_CHARS = 32;

/** The attribution key, derived from the installation's secrets key (HKDF-SHA256). */
export function attributionKey(secretsKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', secretsKey, Buffer.alloc(0), 'sbx egress call attribution', 32));
}

function tokenOf(key: Buffer, leaseId: string, callId: string): string {
  return createHmac('sha256', key).update(`${leaseId}\0${callId}`).digest('base64url').slice(0, TOKEN_CHARS);
}

/**
 * The proxy credential of call `callId` in lease `leaseId`: `<callId>:<token>`, only unreserved
 * URL characters (call ids are `[A-Za-z0-9_-]`), so it goes into a proxy URL's userinfo as it is.
 */
export function callCredential(key: Buffer, leaseId: string, callId: string): string {
  return `${callId}:${tokenOf(key, leaseId, callId)}`;
}

/**
 * The call a `Proxy-Authorization` header names, when it is `Basic` with that call's credential
 * in `leaseId`; null for no header, another scheme, a malformed value or a wrong token.
 */
export function attributedCall(key: Buffer, leaseId: string, header: string | undefined): string | null {
  const match = /^basic\s+([A-Za-z0-9+/=]{1,400})\s*$/i.exec(header ?? '');
  if (!match) return null;
  const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon <= 0) return null;
  const callId = decoded.slice(0, colon);
  if (!/^[A-Za-z0-9_-]{1,128}$/.test(callId)) return null;
  const given = Buffer.from(decoded.slice(colon + 1));
  const expected = Buffer.from(tokenOf(key, leaseId, callId));
  return given.length === expected.length && timingSafeEqual(given, expected) ? callId : null;
}

/** The attribution of one installation: credentials for calls, and the call a request names. */
export class EgressAttribution {
  private readonly key: Buffer;

  constructor(secretsKey: Buffer) {
    this.key = attributionKey(secretsKey);
  }

  /** The proxy credential of `callId` in `leaseId` (callCredential). */
  credential(leaseId: string, callId: string): string {
    return callCredential(this.key, leaseId, callId);
  }

  /** The call `proxyAuthorization` names in `leaseId` (attributedCall), or null. */
  callOf(leaseId: string, proxyAuthorization: string | undefined): string | null {
    return attributedCall(this.key, leaseId, proxyAuthorization);
  }
}
