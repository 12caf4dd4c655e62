import { defineConfig } from 'vitest/config';

// Three projects: `unit` (pure modules, beside the code, no Docker or Redis: the demo runs these
// inside a sandbox) and `integration` (test/: real Docker engine and real Redis, one file at a
// time because they share the engine; a global setup names the run and a teardown removes what it left),
// and `kubernetes` (test/kubernetes/: the Kubernetes driver on the lab cluster, test/lab/).
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
          // The Kubernetes driver's suite needs the lab cluster: test/lab/kubernetes-suite.sh runs it.
          exclude: ['test/kubernetes/**'],
          environment: 'node',
          fileParallelism: false,
          // Gives the run its id and, after it, removes and checks for whatever it left (test/README.md).
          globalSetup: ['test/fixtures/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'kubernetes',
          include: ['test/kubernetes/**/*.test.ts'],
          environment: 'node',
          fileParallelism: false,
          globalSetup: ['test/fixtures/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
