/**
 * `sbx ps ID` (the sandbox's processes) and `sbx kill ID PID [SIGNAL]` (one signal to one of the
 * tool user's processes; default SIGTERM). `--json` prints the API's answer.
 */
import { type Command, InvalidArgumentError } from 'commander';
import { SIGNAL_NAMES, type SignalName } from '../contract/tools/processes.js';
import { Sandbox, type ConnectionOptions, type ProcessInfo } from '../sdk/index.js';

/** A signal as `sbx kill` takes it: `TERM`, `SIGTERM`, `sigterm` or its number (`15`). Throws InvalidArgumentError. */
export function parseSignal(value: string): SignalName {
  const numbers: Record<string, SignalName> = { '1': 'SIGHUP', '2': 'SIGINT', '3': 'SIGQUIT', '9': 'SIGKILL', '15': 'SIGTERM' };
  const upper = value.toUpperCase();
  const name = numbers[value] ?? (upper.startsWith('SIG') ? upper : `SIG${upper}`);
  if (!(SIGNAL_NAMES as readonly string[]).includes(name))
    throw new InvalidArgumentError(`a signal: ${SIGNAL_NAMES.join(', ')} (or 1, 2, 3, 9, 15)`);
  return name as SignalName;
}

/** One line of `sbx ps`: pid, ppid, user, CPU ms, RSS KiB, owner, killable, command. */
function line(p: ProcessInfo): string {
  const owner = p.owner ? `${p.owner.kind}:${p.owner.id}` : '-';
  return [
    String(p.pid).padStart(7),
    String(p.ppid).padStart(7),
    p.user.padEnd(10),
    String(p.cpuTimeMs).padStart(9),
    String(Math.round(p.rssBytes / 1024)).padStart(8),
    owner.padEnd(40),
    p.killable ? 'yes' : 'no ',
    p.command,
  ].join(' ');
}

/** Adds `sbx ps` and `sbx kill` to `program`; `connection()` reads the global options when a command runs. */
export function addProcessCommands(program: Command, connection: () => ConnectionOptions & { json?: boolean }): void {
  program
    .command('ps')
    .description("a sandbox's processes: pid, ppid, user, CPU ms, RSS KiB, owner (call, session, terminal), killable, command")
    .argument('<id>')
    .action(async (id: string) => {
      const { json, ...conn } = connection();
      const list = await (await Sandbox.connect(id, conn)).processes.list();
      if (json) {
        process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
        return;
      }
      process.stdout.write(
        `${'PID'.padStart(7)} ${'PPID'.padStart(7)} ${'USER'.padEnd(10)} ${'CPU_MS'.padStart(9)} ${'RSS_KIB'.padStart(8)} ${'OWNER'.padEnd(40)} KILL COMMAND\n`,
      );
      for (const p of list.processes) process.stdout.write(`${line(p)}\n`);
    });
  program
    .command('kill')
    .description(
      "send a signal (default TERM) to one of the tool user's processes of a sandbox; init, the agent and its worker are refused",
    )
    .argument('<id>')
    .argument('<pid>', 'process id in the sandbox', (v: string) => {
      if (!/^\d+$/.test(v) || Number(v) < 1) throw new InvalidArgumentError('a positive pid');
      return Number(v);
    })
    .argument('[signal]', `signal name or number: ${SIGNAL_NAMES.join(', ')}`, parseSignal)
    .action(async (id: string, pid: number, signal: SignalName | undefined) => {
      const { json, ...conn } = connection();
      const sent = await (await Sandbox.connect(id, conn)).processes.signal(pid, signal);
      process.stdout.write(
        json
          ? `${JSON.stringify(sent, null, 2)}\n`
          : `sent ${sent.signal} to ${sent.pid} (${sent.process?.command ?? '?'}), receipt ${sent.receiptId}\n`,
      );
    });
}
