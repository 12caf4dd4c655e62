/**
 * The egress proxy's own name resolution: A and AAAA lookups through c-ares (node:dns
 * `Resolver`), against the configured DNS servers or, by default, the host's resolv.conf ones.
 * The sandbox itself never resolves: it has no network to do it with.
 */
import { Resolver } from 'node:dns/promises';
import type { Resolve } from './proxy.js';

/**
 * A resolver over `servers` (`ip` or `ip:port`, see `dns.setServers`); empty = the system's.
 * Resolves to IPv4 addresses first, then IPv6; rejects with the lookup's error (code
 * `ENOTFOUND`, `ETIMEOUT` …) when neither family has an answer.
 */
export function createResolver(servers: readonly string[], timeoutMs = 5000): Resolve {
  const resolver = new Resolver({ timeout: timeoutMs, tries: 2 });
  if (servers.length > 0) resolver.setServers([...servers]);
  return async (host) => {
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
    const addresses = [...(v4.status === 'fulfilled' ? v4.value : []), ...(v6.status === 'fulfilled' ? v6.value : [])];
    if (addresses.length === 0 && v4.status === 'rejected') throw v4.reason;
    return addresses;
  };
}
