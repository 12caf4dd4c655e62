import { describe, expect, it } from 'vitest';
import { parseOsRelease } from './facts.js';

describe('parseOsRelease', () => {
  it('reads KEY=value lines with and without quotes (os-release(5))', () => {
    expect(parseOsRelease('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n# comment\n')).toEqual({
      PRETTY_NAME: 'Debian GNU/Linux 12 (bookworm)',
      ID: 'debian',
      VERSION_ID: '12',
    });
  });
});
