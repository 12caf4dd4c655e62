/**
 * The file, search and git tools as the agent runs them: each is one operation of the
 * tool-user worker (tool-user/file-ops.ts, tool-user/process-ops.ts), with the receipt facts
 * the operation reports (file versions before and after) and honest commit states: an
 * operation that failed wrote nothing (`not_started`); a write cut off by a timeout or cancel
 * may or may not have renamed its file into place (`unknown`).
 */
import { errorInfo } from '../../contract/errors.js';
import { runsCode, TOOL_SPEC, writesFiles } from '../../contract/tools.js';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AgentTool, AttemptContext, AttemptOutcome } from '../execution/attempt.js';
import { ToolCancelled, ToolTimeout, type ToolUserWorker } from '../tool-user/client.js';
import { sweepProcesses } from '../host/process-sweep.js';
import type { Redaction } from '../output/redactor.js';
import { ToolError } from '../tool-user/file-ops.js';
import { FILE_OPS, type FileOpName } from '../tool-user/protocol.js';

/** The file tools, by their specs: each is the tool-user worker's operation of the same name. */
export function fileTools(worker: ToolUserWorker): Array<AgentTool<unknown>> {
  return FILE_OPS.map((name) => fileTool(worker, name));
}

function fileTool(worker: ToolUserWorker, name: FileOpName): AgentTool<unknown> {
  const spec = TOOL_SPEC[name];
  // Programs (git may run a repository's filters) are swept afterwards like exec's.
  const codeRuns = runsCode(spec);
  const writes = writesFiles(spec);
  return {
    name,
    version: spec.version,
    parse: (args: unknown) => spec.args.parse(args),
    async execute(ctx, args): Promise<AttemptOutcome> {
      const startedAt = new Date();
      ctx.emit({ type: 'call.started', attemptId: ctx.attemptId, pid: worker.pid });
      const base = {
        startedAt,
        exit: null,
        environment: null,
        outputs: null,
        cleanup: null,
        stdout: '',
        stderr: '',
        truncation: null,
        runner: { pid: worker.pid, uid: ctx.toolUser.uid, gid: ctx.toolUser.gid },
      };
      try {
        const r = await worker.request(name, args, ctx.timeoutMs, ctx.cancelSignal).finally(async () => {
          if (codeRuns) await sweepProcesses(ctx.toolUser.uid, ctx.agentPids(), ctx.processTrees.sessionIds());
        });
        const inline = name === 'git_diff' ? (args as { maxBytes: number }).maxBytes : DIFF_INLINE_BYTES;
        // A file may hold a secret value a call wrote there: what leaves the sandbox (data, text,
        // diff artifact) is redacted like exec output. Hashes in data stay those of the files.
        const { redaction } = ctx.secrets;
        const { data, artifacts, modelText } = await diffToArtifact(
          ctx,
          redactData(redaction, r.data),
          redaction.redactText(r.modelText),
          inline,
        );
        return {
          ...base,
          endedAt: new Date(),
          status: 'succeeded',
          commitState: 'committed',
          error: null,
          data,
          versions: r.versions,
          modelText,
          artifacts,
        };
      } catch (err) {
        const endedAt = new Date();
        const interrupted = writes || codeRuns ? ('unknown' as const) : ('not_started' as const);
        if (err instanceof ToolTimeout) {
          const error = errorInfo('execution.timeout', err.message, { timeoutMs: ctx.timeoutMs });
          ctx.emit({ type: 'call.timed_out', timeoutMs: ctx.timeoutMs });
          return {
            ...base,
            endedAt,
            status: 'timed_out',
            commitState: interrupted,
            error,
            data: null,
            versions: [],
            modelText: error.message,
          };
        }
        if (err instanceof ToolCancelled) {
          ctx.emit({ type: 'call.cancel_acknowledged', attemptId: ctx.attemptId });
          const error = errorInfo('execution.cancelled', err.message);
          return {
            ...base,
            endedAt,
            status: 'cancelled',
            commitState: interrupted,
            error,
            data: null,
            versions: [],
            modelText: error.message,
          };
        }
        if (err instanceof ToolError) {
          const { redaction } = ctx.secrets;
          const error = redaction.redactDeep(errorInfo(err.code, err.message, err.details));
          return {
            ...base,
            endedAt,
            status: 'failed',
            commitState: 'not_started',
            error,
            data: null,
            versions: [],
            modelText: `${error.code}: ${error.message}`,
          };
        }
        const error = errorInfo('execution.effect_unknown', `the tool-user worker failed: ${(err as Error).message}`);
        return {
          ...base,
          endedAt,
          status: 'effect_unknown',
          commitState: writes ? 'unknown' : 'not_started',
          error,
          data: null,
          versions: [],
          modelText: error.message,
        };
      }
    },
  };
}

/**
 * `data` with every secret value replaced: in its strings, and in the bytes of base64 file
 * content (read_file `encoding: base64`), which is decoded, redacted and encoded again.
 */
function redactData(redaction: Redaction, data: Record<string, unknown>): Record<string, unknown> {
  if (!redaction.active) return data;
  if (data.encoding === 'base64' && typeof data.content === 'string') {
    const content = redaction.redactBytes(Buffer.from(data.content, 'base64')).toString('base64');
    return { ...redaction.redactDeep({ ...data, content: '' }), content };
  }
  return redaction.redactDeep(data);
}

/** Bytes of a diff kept in the result of write_file and edit_file; a longer diff becomes an artifact. */
const DIFF_INLINE_BYTES = 64 * 1024;

/**
 * Keeps the head of a long `data.diff` in the result and sends the whole diff as an artifact
 * (`data.diffArtifact`), so a model reads a bounded text and the full patch stays retrievable.
 */
async function diffToArtifact(
  ctx: AttemptContext,
  data: Record<string, unknown>,
  modelText: string,
  inlineBytes: number,
): Promise<{ data: Record<string, unknown>; artifacts: AttemptOutcome['artifacts']; modelText: string }> {
  const diff = data.diff;
  if (typeof diff !== 'string' || Buffer.byteLength(diff) <= inlineBytes) return { data, artifacts: [], modelText };
  const bytes = Buffer.byteLength(diff);
  const head = Buffer.from(diff).subarray(0, inlineBytes).toString('utf8');
  // The spool is shared: without room in its budget the diff stays cut, with no artifact.
  const granted = ctx.spool.budget.take(bytes);
  if (granted < bytes) {
    ctx.spool.budget.give(granted);
    const note = `[diff truncated: ${bytes} bytes in all; no spool room to keep the whole]`;
    return {
      data: { ...data, diff: head, diffTruncated: true, diffBytes: bytes, diffArtifact: null },
      artifacts: [],
      modelText: `${head}\n${note}`,
    };
  }
  const path = join(ctx.spool.dir, `${ctx.attemptId}.diff`);
  // The file and its spool room go once the control plane has fetched the artifact (or now, when it cannot be offered).
  const release = async (): Promise<void> => {
    await rm(path, { force: true });
    ctx.spool.budget.give(bytes);
  };
  try {
    await writeFile(path, diff, { mode: 0o600 });
  } catch (err) {
    await release();
    throw err;
  }
  const artifact = await ctx.offerArtifact({ path, release }, 'diff.patch', 'text/x-diff');
  const note = `[diff truncated: ${bytes} bytes in all, whole diff in artifact ${artifact.id}]`;
  return {
    data: { ...data, diff: head, diffTruncated: true, diffBytes: bytes, diffArtifact: artifact.id },
    artifacts: [artifact],
    modelText: modelText === diff ? `${head}\n${note}` : `${modelText}\n${note}`,
  };
}
