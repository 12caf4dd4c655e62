import { defineConfig } from 'vitest/config';

// Two projects: `unit` (pure modules, beside the code, no Docker or Redis: the demo runs these
// inside a sandbox) and `integration` (test/: real Docker engine and real Redis, one file at a
// time because they share the engine; a global setup names the run and a teardown removes what it left).
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: [
            'contract/**/*.test.ts',
            'control-plane/**/*.test.ts',
            'sandbox-agent/**/*.test.ts',
            'cli/**/*.test.ts',
            'console/**/*.test.ts',
            'deploy/**/*.test.ts',
            'sdk/**/*.test.ts',
            'bench/**/*.test.ts',
          ],
          environment: 'node',
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts'],
          environment: 'node',
          fileParallelism: false,
          // Gives the run its id and, after it, removes and checks for whatever it left (test/README.md).
          globalSetup: ['test/fixtures/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
