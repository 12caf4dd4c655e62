import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { DEFAULT_TOOL_USER, parseImageUser, resolveImageUser } from './tool-user.js';

const PASSWD = 'root:x:0:0:root:/root:/bin/bash\n# comment\napp:x:1500:1600:App:/home/app:/bin/sh\nnohome:x:1700:1700::\n';
const GROUP = 'root:x:0:\nstaff:x:50:\napp:x:1600:\n';

describe('the image User as the tool user', () => {
  it('root in any spelling, or no User, is no image user (the default applies)', () => {
    for (const user of [null, '', 'root', '0', '0:0', 'root:staff']) expect(parseImageUser(user)).toBeNull();
    expect(parseImageUser('app')).toEqual({ user: 'app', group: null });
    expect(parseImageUser('1500:staff')).toEqual({ user: '1500', group: 'staff' });
  });

  it('a name resolves in the image passwd: uid, primary gid and home', () => {
    expect(resolveImageUser({ user: 'app', group: null }, PASSWD, GROUP)).toEqual({
      name: 'app',
      uid: 1500,
      gid: 1600,
      home: '/home/app',
      source: 'image',
    });
  });

  it('a group by name or number overrides the primary group', () => {
    expect(resolveImageUser({ user: 'app', group: 'staff' }, PASSWD, GROUP).gid).toBe(50);
    expect(resolveImageUser({ user: 'app', group: '77' }, PASSWD, GROUP).gid).toBe(77);
  });

  it('a number absent from passwd is that uid and gid with home / (as the engine runs it); present, it takes the entry', () => {
    expect(resolveImageUser({ user: '4242', group: null }, null, null)).toEqual({
      name: '4242',
      uid: 4242,
      gid: 4242,
      home: '/',
      source: 'image',
    });
    expect(resolveImageUser({ user: '1500', group: null }, PASSWD, GROUP)).toMatchObject({ name: 'app', gid: 1600 });
    expect(resolveImageUser({ user: '1700', group: null }, PASSWD, GROUP).home).toBe('/');
  });

  it('a uid 0 under another name (toor) is never the tool user; a passwd uid or gid that is no id (abc, out of range) is image.user_not_found', () => {
    const passwd = 'toor:x:0:0::/root:/bin/sh\nbad:x:abc:1:::\nhuge:x:99999999999:1:::\n';
    expect(resolveImageUser({ user: 'toor', group: null }, passwd, GROUP)).toEqual(DEFAULT_TOOL_USER);
    expect(resolveImageUser({ user: '00', group: null }, passwd, GROUP)).toEqual(DEFAULT_TOOL_USER);
    for (const wanted of [
      { user: 'bad', group: null },
      { user: 'huge', group: null },
      { user: '4294967296', group: null },
      { user: 'toor', group: '99999999999' },
    ]) {
      let code = 'none';
      try {
        resolveImageUser(wanted, passwd, GROUP);
      } catch (err) {
        code = (err as AppError).code;
      }
      expect(code, JSON.stringify(wanted)).toBe('image.user_not_found');
    }
  });

  it('a name or group the image does not define is image.user_not_found; uid 0 by number falls back to the default, never root', () => {
    const code = (f: () => unknown): string | undefined => {
      try {
        f();
      } catch (err) {
        return err instanceof AppError ? err.code : 'other';
      }
      return undefined;
    };
    expect(code(() => resolveImageUser({ user: 'ghost', group: null }, PASSWD, GROUP))).toBe('image.user_not_found');
    expect(code(() => resolveImageUser({ user: 'app', group: 'ghosts' }, PASSWD, GROUP))).toBe('image.user_not_found');
    expect(resolveImageUser({ user: '00', group: null }, PASSWD, GROUP)).toEqual(DEFAULT_TOOL_USER);
  });
});
