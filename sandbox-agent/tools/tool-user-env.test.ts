import { describe, expect, it } from 'vitest';
import { EXEC_ENV_DEFAULTS, toolUserEnv } from './exec.js';

const ctx = {
  imageEnv: { PATH: '/opt/conda/bin:/usr/bin', TERM: 'image-term', HOME: '/root' },
  networkEnv: { HTTPS_PROXY: 'http://127.0.0.1:3128' },
  toolUser: { uid: 1000, gid: 1000, name: 'sbx', home: '/home/sbx' },
};

describe('toolUserEnv', () => {
  it("layers defaults < image < sbx's own < the lease's and the call's", () => {
    const env = toolUserEnv(ctx, { HTTPS_PROXY: 'http://mine', CI: '1' });
    expect(env).toMatchObject({
      NO_COLOR: '1',
      PATH: '/opt/conda/bin:/usr/bin',
      TERM: 'image-term',
      HOME: '/home/sbx',
      USER: 'sbx',
      LOGNAME: 'sbx',
      HTTPS_PROXY: 'http://mine',
      CI: '1',
    });
  });

  it('a terminal: only the defaults it asks for, and its TERM and SHELL over the image', () => {
    const env = toolUserEnv(ctx, {}, { LANG: EXEC_ENV_DEFAULTS.LANG! }, { TERM: 'xterm-256color', SHELL: '/bin/bash' });
    expect(env.NO_COLOR).toBeUndefined();
    expect(env).toMatchObject({ LANG: 'C.UTF-8', TERM: 'xterm-256color', SHELL: '/bin/bash', HOME: '/home/sbx' });
    expect(toolUserEnv(ctx, { TERM: 'dumb' }, {}, { TERM: 'xterm-256color' }).TERM).toBe('dumb');
  });
});
