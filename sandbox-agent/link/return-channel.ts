/**
 * The agent's half of the return path: appends events, results and artifact announcements to the
 * lease's return stream (`LeaseKeys.returns`, one entry per message, contract/queue.ts) in the
 * order they were produced. Each message carries its deterministic identity (an event's
 * attempt and number, a result's call, an artifact's id), so one appended twice —
 * ioredis resends a command whose answer a reconnect lost — is ledgered once (docs/DESIGN.md §5).
 */
import { encodeReturn } from '../../contract/queue.js';
import type { EventBody } from '../../contract/events.js';
import type { ToolResult } from '../../contract/objects.js';
import type { ReturnMessage } from '../../contract/queue.js';
import type { AgentSpan } from '../../contract/trace.js';

/** Where return messages go: the lease's return stream (main.ts binds it to Redis). */
export interface ReturnStream {
  /** Appends one entry (XADD) with these fields; resolves once Redis has it. */
  append(fields: (string | Buffer)[]): Promise<unknown>;
}

/** First and longest pause before a refused append is tried again, ms. */
const APPEND_RETRY_FIRST_MS = 50;
const APPEND_RETRY_MAX_MS = 2000;

export class ReturnChannel {
  private tail: Promise<unknown> = Promise.resolve();

  /** `onRetry`: told of each append Redis refused (LOADING after a restart, OOM), before it is tried again. */
  constructor(
    private readonly stream: ReturnStream,
    private readonly onRetry: (err: unknown) => void = () => undefined,
  ) {}

  /** Opens the event sequence of one attempt. */
  forAttempt(callId: string, attemptId: string): AttemptChannel {
    let n = 0;
    return {
      emit: (body) => {
        n += 1;
        this.send({ kind: 'event', callId, attemptId, n, body });
      },
      result: (result, trace) =>
        this.sendAndWait(
          trace === undefined ? { kind: 'result', callId, attemptId, result } : { kind: 'result', callId, attemptId, result, trace },
        ),
      detached: (result) => this.send({ kind: 'detached', callId, attemptId, result }),
    };
  }

  /**
   * Announces artifact `artifactId` (`artifact_ready`: its size in bytes and sha256, hex), held
   * by the agent for the control plane to fetch over a transfer tunnel (link/artifact-shelf.ts);
   * resolves once the announcement is in Redis. The bytes never enter the stream.
   */
  async offerArtifact(callId: string, artifactId: string, name: string, mediaType: string, size: number, sha256: string): Promise<void> {
    await this.sendAndWait({ kind: 'artifact_ready', callId, artifactId, name, mediaType, size, sha256 });
  }

  /** Resolves once everything sent so far is in Redis. */
  async settled(): Promise<void> {
    await this.tail;
  }

  /**
   * Chained, not pipelined: each append waits for the previous one, so the stream's order is the
   * production order also when ioredis resends a command after a reconnect. An append Redis
   * refuses (an error reply: the connection itself waits out a disconnect) is tried again until
   * taken, later ones waiting: a message is never skipped, and a passing refusal does not stop
   * the agent's return path for good.
   */
  private send(message: ReturnMessage): void {
    const fields = encodeReturn(message);
    this.tail = this.tail.then(async () => {
      for (let pauseMs = APPEND_RETRY_FIRST_MS; ; pauseMs = Math.min(pauseMs * 2, APPEND_RETRY_MAX_MS)) {
        try {
          await this.stream.append(fields);
          return;
        } catch (err) {
          this.onRetry(err);
          await new Promise((r) => setTimeout(r, pauseMs));
        }
      }
    });
  }

  private async sendAndWait(message: ReturnMessage): Promise<void> {
    this.send(message);
    await this.settled();
  }
}

export interface AttemptChannel {
  emit(body: EventBody): void;
  /** The attempt's result, with its phases as spans of the call's trace when it is traced (contract/trace.ts). */
  result(result: ToolResult, trace?: AgentSpan[]): Promise<void>;
  /** A background task's handle; ordered with the events around it. */
  detached(result: ToolResult): void;
}
