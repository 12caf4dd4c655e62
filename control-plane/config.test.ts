import { describe, expect, it } from 'vitest';
import { loadConfig } from './config.js';

const repoRoot = new URL('..', import.meta.url).pathname;
const base = { SBX_REDIS_URL: 'unix:///tmp/none.sock' };

describe('SBX_DEFAULT_TENANT_QUOTA', () => {
  it('defaults to no limits and takes a JSON object of limits', () => {
    expect(loadConfig(base, repoRoot).defaultTenantQuota).toEqual({});
    expect(
      loadConfig({ ...base, SBX_DEFAULT_TENANT_QUOTA: '{"maxSandboxes": 5, "maxCpus": 2.5, "maxMemoryBytes": null}' }, repoRoot)
        .defaultTenantQuota,
    ).toEqual({
      maxSandboxes: 5,
      maxCpus: 2.5,
      maxMemoryBytes: null,
    });
  });

  it('refuses what is not JSON, unknown fields and negative limits, naming the variable', () => {
    for (const bad of ['maxSandboxes=5', '{"maxPids": 3}', '{"maxSandboxes": -1}', '{"maxSandboxes": 1.5}']) {
      expect(() => loadConfig({ ...base, SBX_DEFAULT_TENANT_QUOTA: bad }, repoRoot), bad).toThrow(/SBX_DEFAULT_TENANT_QUOTA/);
    }
  });
});
