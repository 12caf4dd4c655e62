/**
 * The processes of one terminal wherever they went: a job that called setsid(2) (`setsid sleep
 * 100 &`, a daemon's double fork) leaves the terminal's session, and once its parent exits its
 * ancestry is gone too, but it keeps the environment it was started with. Every process of a
 * terminal inherits `SBX_PROCESS_TREE=<terminal id>`; the terminal's end kills every tool-user
 * process whose environment holds it. (A shell session needs none: the sweep after each of its
 * commands takes what left its session.) What clears its environment (`env -i`) escapes this, and
 * is left to the sweep after the next exec.
 *
 * /proc/<pid>/environ is readable by the process's own uid (or with CAP_SYS_PTRACE, which the
 * agent does not have), so the scan runs as the tool user, in a short-lived node process.
 */
import { execFile } from 'node:child_process';

/** The variable that names a process's tree. */
export const TREE_MARKER_VAR = 'SBX_PROCESS_TREE';

/** Lists the pids (space-separated) whose environment holds the entry `argv[1]`. */
const SCAN = `const fs=require('fs');const want=process.argv[1];const out=[];
for(const n of fs.readdirSync('/proc')){if(!/^\\d+$/.test(n))continue;
try{if(fs.readFileSync('/proc/'+n+'/environ','latin1').split('\\0').includes(want))out.push(n)}catch{}}
process.stdout.write(out.join(' '))`;

/** Pids of the tool user's processes started within tree `id`; [] when the scan fails. */
export function markedProcesses(id: string, user: { uid: number; gid: number }): Promise<number[]> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['-e', SCAN, `${TREE_MARKER_VAR}=${id}`],
      { uid: user.uid, gid: user.gid, env: {}, timeout: 10_000 },
      (err, stdout) => resolve(err ? [] : stdout.split(' ').filter(Boolean).map(Number)),
    );
  });
}

/** SIGKILLs every process of tree `id`, repeating while new ones appear (up to 5 rounds); returns how many it killed. */
export async function killMarked(id: string, user: { uid: number; gid: number }): Promise<number> {
  let killed = 0;
  for (let round = 0; round < 5; round += 1) {
    const pids = await markedProcesses(id, user);
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
        killed += 1;
      } catch {
        // ESRCH: gone already.
      }
    }
  }
  return killed;
}
