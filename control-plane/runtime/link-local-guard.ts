/**
 * The host firewall rule that keeps sandboxes on an `open` network away from link-local
 * addresses (169.254.0.0/16, where cloud metadata services answer at 169.254.169.254, and
 * fe80::/10): a DROP in the `raw` table's PREROUTING chain for packets arriving from any sbx
 * bridge (interfaces `sbxbr*`). `raw` PREROUTING sees a packet before routing decides whether
 * it is forwarded or for the host itself (iptables-extensions(8), netfilter hook order), so one
 * rule covers both, and Docker never rewrites that table.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { AppError } from '../../contract/errors.js';

const run = promisify(execFile);

/** Interface name prefix of sbx bridges; `+` is iptables' wildcard suffix. */
export const SBX_BRIDGE_PREFIX = 'sbxbr';

const RULES: Array<{ tool: 'iptables' | 'ip6tables'; destination: string }> = [
  { tool: 'iptables', destination: '169.254.0.0/16' },
  { tool: 'ip6tables', destination: 'fe80::/10' },
];

/**
 * Makes sure both rules are installed (checks with `-C`, inserts with `-I` when missing); run
 * before every open-network sandbox starts, so a flushed table is noticed. Throws AppError
 * `policy.unenforceable` when a rule can be neither found nor installed (no iptables, no
 * privilege): the sandbox is not started without it.
 */
export async function ensureLinkLocalBlocked(): Promise<void> {
  for (const { tool, destination } of RULES) {
    const rule = ['-t', 'raw', 'PREROUTING', '-i', `${SBX_BRIDGE_PREFIX}+`, '-d', destination, '-j', 'DROP'];
    const args = (op: string): string[] => ['-w', '5', rule[0]!, rule[1]!, op, ...rule.slice(2)];
    const present = await run(tool, args('-C')).then(
      () => true,
      () => false,
    );
    if (present) continue;
    try {
      await run(tool, args('-I'));
    } catch (err) {
      throw new AppError(
        'policy.unenforceable',
        `network mode "open" needs a ${tool} rule dropping ${destination} from sandbox bridges, and it could not be installed: ${(err as Error).message.split('\n')[0]}`,
        {
          details: { field: 'network.mode', mode: 'open', tool, destination },
          cause: err,
        },
      );
    }
  }
}
