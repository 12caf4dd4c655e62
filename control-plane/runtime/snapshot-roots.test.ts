import { describe, expect, it } from 'vitest';
import { deviceByMountPoint, rootArchiveName, snapshotDirOf } from './snapshot-roots.js';

describe('snapshot roots', () => {
  it('mountinfo: the topmost mount at each point, its st_dev as glibc makedev gives it, escaped names unescaped', () => {
    const text = [
      '83 1 0:31 / / rw,relatime - overlay overlay rw',
      '100 83 0:42 / /workspace rw,relatime master:4 - tmpfs tmpfs rw,size=976564k',
      '101 83 0:50 / /tmp rw,nosuid - tmpfs tmpfs rw',
      '102 101 0:51 / /tmp rw,nosuid - tmpfs tmpfs rw',
      '103 83 259:300 / /my\\040dir rw - ext4 /dev/x rw',
    ].join('\n');
    const mounts = deviceByMountPoint(text);
    expect(mounts.get('/workspace')).toBe(42);
    expect(mounts.get('/tmp')).toBe(51);
    // major 259 minor 300: (259 << 8) | (300 & 0xff) | ((300 & ~0xff) << 12)
    expect(mounts.get('/my dir')).toBe((259 << 8) + (300 & 0xff) + (256 << 12));
    expect(mounts.has('/home')).toBe(false);
  });

  it('archive names and snapshot directories: one file per root path, a directory only for a snapshot ref', () => {
    expect(rootArchiveName('/home/sandbox')).toBe('%2Fhome%2Fsandbox.tar');
    const hex = 'a'.repeat(64);
    expect(snapshotDirOf('/d', `sbx-snapshot:${hex}`)).toBe(`/d/${hex}`);
    expect(snapshotDirOf('/d', 'sbx-sandbox:1234')).toBeNull();
    expect(snapshotDirOf('/d', 'sbx-snapshot:../../etc')).toBeNull();
  });
});
