/**
 * The tool-user worker: a process of the agent's own bundle that drops to the tool user and
 * then runs file, search and git operations for the agent over Node IPC. Dropping privileges
 * itself (setgroups, setgid, setuid after exec) leaves it non-dumpable (prctl(2),
 * PR_SET_DUMPABLE: reset when credentials change), so code of the same uid cannot ptrace it.
 */
import { TOOL_ARGS } from '../../contract/tools.js';
import { editFileOp, readFileOp, ToolError, writeFileOp, type OpResult } from './file-ops.js';
import { globOp, listFilesOp } from './listing-ops.js';
import { gitDiffOp, gitStatusOp, searchOp } from './process-ops.js';
import { makeDirOp, moveOp, removeOp, statOp } from './tree-ops.js';
import { FILE_OPS, WorkerConfig, type FileOpName, type WorkerReply, type WorkerRequest } from './protocol.js';

export async function runToolUserWorker(configJson: string): Promise<void> {
  const config = WorkerConfig.parse(JSON.parse(configJson));
  process.setgroups?.([config.gid]);
  process.setgid?.(config.gid);
  process.setuid?.(config.uid);
  process.umask(0o022);
  const ctx = { roots: config.roots, maxFileBytes: config.maxFileBytes, home: config.home, path: config.path };
  const ops: Record<FileOpName, (args: unknown, signal: AbortSignal) => Promise<OpResult>> = {
    read_file: (a) => readFileOp(TOOL_ARGS.read_file.parse(a), ctx),
    write_file: (a) => writeFileOp(TOOL_ARGS.write_file.parse(a), ctx),
    edit_file: (a) => editFileOp(TOOL_ARGS.edit_file.parse(a), ctx),
    list_files: (a) => listFilesOp(TOOL_ARGS.list_files.parse(a), ctx),
    glob: (a) => globOp(TOOL_ARGS.glob.parse(a), ctx),
    search: (a, signal) => searchOp(TOOL_ARGS.search.parse(a), { ...ctx, signal }),
    git_status: (a, signal) => gitStatusOp(TOOL_ARGS.git_status.parse(a), { ...ctx, signal }),
    git_diff: (a, signal) => gitDiffOp(TOOL_ARGS.git_diff.parse(a), { ...ctx, signal }),
    remove: (a) => removeOp(TOOL_ARGS.remove.parse(a), ctx),
    move: (a) => moveOp(TOOL_ARGS.move.parse(a), ctx),
    make_dir: (a) => makeDirOp(TOOL_ARGS.make_dir.parse(a), ctx),
    stat: (a) => statOp(TOOL_ARGS.stat.parse(a), ctx),
  };
  const running = new Map<number, AbortController>();
  process.on('message', (message: WorkerRequest) => {
    if ('cancel' in message) {
      running.get(message.cancel)?.abort();
      return;
    }
    void (async () => {
      let reply: WorkerReply;
      const controller = new AbortController();
      running.set(message.id, controller);
      try {
        if (!FILE_OPS.includes(message.op)) throw new ToolError('input.unknown_tool', `no operation ${String(message.op)}`);
        reply = { id: message.id, ok: true, result: await ops[message.op](message.args, controller.signal) };
      } catch (err) {
        const e = err instanceof ToolError ? err : new ToolError('execution.effect_unknown', (err as Error).message);
        reply = { id: message.id, ok: false, error: { code: e.code, message: e.message, ...(e.details ? { details: e.details } : {}) } };
      }
      running.delete(message.id);
      process.send?.(reply);
    })();
  });
  process.on('disconnect', () => process.exit(0));
}
