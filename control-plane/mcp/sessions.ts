/**
 * Remote MCP sessions (issue 17 part 2): each one the sbx MCP server (sdk/mcp-server.ts) on a
 * Streamable HTTP transport of the official SDK, owned by the API key that opened it, bound to
 * its own sandbox (leased at its first tool call, as the caller, through this control plane's own
 * API) and released when the session ends: a `DELETE`, its idle time passing, or this process
 * closing. Resumable: every message a session sends on a stream is kept (the newest
 * EVENTS_KEPT per session) under an event id, and a client that reconnects with `Last-Event-ID`
 * gets what came after (MCP Streamable HTTP, resumability).
 *
 * A session lives in the process that opened it: with several replicas, a load balancer must
 * keep a session's requests on one (by the `Mcp-Session-Id` header).
 */
import { randomBytes } from 'node:crypto';
import { StreamableHTTPServerTransport, type EventStore } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { createMcpServer, type SbxMcpServer } from '../../sdk/mcp-server.js';
import type { CreateSandboxOptions } from '../../sdk/client.js';
import { AppError } from '../../contract/errors.js';
import type { Principal } from '../http/auth.js';

/** Messages kept per session for resumption, at most, and their bytes (JSON) at most. */
const EVENTS_KEPT = 1000;
const EVENT_BYTES_KEPT = 8 * 1024 * 1024;
/** Sessions one API key may hold open at once, and this process at all. */
export const SESSIONS_PER_KEY = 16;
export const SESSIONS_MAX = 512;

/** A session's resumable streams: its messages by event id, the newest EVENTS_KEPT within EVENT_BYTES_KEPT. */
class SessionEvents implements EventStore {
  private readonly events: Array<{ id: string; streamId: string; message: JSONRPCMessage; bytes: number }> = [];
  private bytes = 0;
  private next = 0;

  async storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${streamId}_${(this.next++).toString(36).padStart(8, '0')}`;
    const bytes = JSON.stringify(message).length;
    this.events.push({ id, streamId, message, bytes });
    this.bytes += bytes;
    while (this.events.length > EVENTS_KEPT || (this.bytes > EVENT_BYTES_KEPT && this.events.length > 1))
      this.bytes -= this.events.shift()!.bytes;
    return id;
  }

  async getStreamIdForEventId(eventId: string): Promise<string | undefined> {
    return this.events.find((e) => e.id === eventId)?.streamId;
  }

  async replayEventsAfter(
    lastEventId: string,
    { send }: { send: (id: string, message: JSONRPCMessage) => Promise<void> },
  ): Promise<string> {
    const at = this.events.findIndex((e) => e.id === lastEventId);
    if (at < 0) return '';
    const { streamId } = this.events[at]!;
    for (const e of this.events.slice(at + 1)) if (e.streamId === streamId) await send(e.id, e.message);
    return streamId;
  }
}

/** One open session. */
export interface McpSession {
  id: string;
  transport: StreamableHTTPServerTransport;
  mcp: SbxMcpServer;
  /** Who opened it: only that API key may use the session; its sandbox is released as them. */
  principal: Principal;
  lastUsedMs: number;
  /** Requests under way (a tool call, an open stream): a session with any is not idle. */
  active: number;
}

export interface McpSessionsOptions {
  /** A session unused this long (no request under way, none begun) ends and its sandbox is released, ms. */
  idleMs: number;
  now: () => number;
  /** Releases a session's sandbox in this process (not through the API: the key may be revoked, the server closing). */
  release: (sandboxId: string, by: Principal) => Promise<unknown>;
}

export class McpSessions {
  private readonly sessions = new Map<string, McpSession>();

  constructor(private readonly options: McpSessionsOptions) {}

  /**
   * A new session of `by`, whose calls go to `apiUrl` with `apiKey` (the caller's own key) and
   * lease with `lease`. Registered once its `initialize` was answered (the transport names it).
   */
  open(by: Principal, apiKey: string, apiUrl: string, lease: CreateSandboxOptions): McpSession {
    const held = [...this.sessions.values()].filter((s) => s.principal.keyId === by.keyId).length;
    if (held >= SESSIONS_PER_KEY || this.sessions.size >= SESSIONS_MAX)
      throw new AppError('mcp.session_limit', `this API key has ${held} MCP sessions open (at most ${SESSIONS_PER_KEY}); end one first`, {
        details: { open: held, max: SESSIONS_PER_KEY },
      });
    const mcp = createMcpServer({ connection: { url: apiUrl, apiKey }, lease });
    const session: McpSession = { id: '', transport: undefined!, mcp, principal: by, lastUsedMs: this.options.now(), active: 0 };
    session.transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => `mcp_${randomBytes(16).toString('hex')}`,
      eventStore: new SessionEvents(),
      onsessioninitialized: (id) => {
        session.id = id;
        this.sessions.set(id, session);
      },
      onsessionclosed: (id) => void this.close(id),
    });
    return session;
  }

  /** The session `id` if `by` opened it; null otherwise (another key's session is as absent as none). */
  get(id: string, by: Principal): McpSession | null {
    const session = this.sessions.get(id);
    if (!session || session.principal.keyId !== by.keyId) return null;
    session.lastUsedMs = this.options.now();
    return session;
  }

  /** Counts a request under way on `session` until `done` settles (a session with one is never idle). */
  async serving<T>(session: McpSession, done: Promise<T>): Promise<T> {
    session.active += 1;
    try {
      return await done;
    } finally {
      session.active -= 1;
      session.lastUsedMs = this.options.now();
    }
  }

  /** Ends a session: its transport closed, its sandbox released. Idempotent. */
  async close(id: string): Promise<void> {
    const session = this.sessions.get(id);
    if (!session) return;
    this.sessions.delete(id);
    await session.transport.close().catch(() => undefined);
    const sandboxId = await session.mcp.end();
    if (sandboxId !== null) await this.options.release(sandboxId, session.principal).catch(() => undefined);
  }

  /** Ends the sessions idle past `idleMs`; returns how many. */
  async closeIdle(): Promise<number> {
    const cutoff = this.options.now() - this.options.idleMs;
    const idle = [...this.sessions.values()].filter((s) => s.active === 0 && s.lastUsedMs < cutoff).map((s) => s.id);
    await Promise.all(idle.map((id) => this.close(id)));
    return idle.length;
  }

  /** Ends every session (this process is closing). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.sessions.keys()].map((id) => this.close(id)));
  }

  get size(): number {
    return this.sessions.size;
  }
}
