/**
 * The lease's file change log on Redis (`LeaseKeys.changes`, a stream; contract/watch.ts): the
 * `ChangeLogWriter` of host/file-watch.ts. Entry ids are `<seq>-0`; the stream is MAXLEN-bounded
 * (`CHANGE_LOG_MAX_ENTRIES`, approximate trimming).
 */
import type { Redis } from 'ioredis';
import { CHANGE_FIELD, CHANGE_LOG_MAX_ENTRIES } from '../../contract/watch.js';
import type { ChangeLogWriter } from '../host/file-watch.js';

/**
 * Appends a batch in one command (a flood of changes costs one round trip and one command per
 * batch, not one per entry). Entries at or below the log's last seq are skipped, so a batch
 * tried again after a write whose answer was lost is not written twice.
 * KEYS[1] the log; ARGV[1] MAXLEN; ARGV[2] the field; ARGV[3..] seq, JSON, seq, JSON, ...
 */
const APPEND = `
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
local lastSeq = last and tonumber(string.match(last[1], '^(%d+)')) or 0
local written = 0
for i = 3, #ARGV, 2 do
  if tonumber(ARGV[i]) > lastSeq then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], ARGV[i] .. '-0', ARGV[2], ARGV[i + 1])
    written = written + 1
  end
end
return written`;

/** The change log of the lease whose stream key is `key`, on the agent's own connection. */
export function redisChangeLog(redis: Redis, key: string): ChangeLogWriter {
  return {
    lastSeq: async () => Number((await redis.xrevrange(key, '+', '-', 'COUNT', 1))[0]?.[0].split('-')[0] ?? 0),
    append: async (entries) => {
      await redis.eval(APPEND, 1, key, CHANGE_LOG_MAX_ENTRIES, CHANGE_FIELD, ...entries.flatMap((e) => [e.seq, JSON.stringify(e)]));
    },
  };
}
