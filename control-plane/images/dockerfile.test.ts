import { describe, expect, it } from 'vitest';
import { baseImages } from './dockerfile.js';

describe('base images of a Dockerfile', () => {
  it('lists FROM and COPY --from images, without scratch and its own stages, with args substituted', () => {
    const text = [
      '# syntax comment',
      'ARG BASE=debian:bookworm',
      'ARG TAG',
      'FROM --platform=linux/amd64 ${BASE} AS build',
      'RUN make \\',
      '  all',
      'FROM scratch',
      'COPY --from=build /out /out',
      'COPY --from=0 /out /out2',
      'COPY --from=127.0.0.1:5000/tools:$TAG /bin/x /bin/x',
      'from build',
    ].join('\n');
    expect(baseImages(text, { TAG: '7' })).toEqual([
      { ref: 'debian:bookworm', line: 4 },
      { ref: '127.0.0.1:5000/tools:7', line: 10 },
    ]);
    expect(baseImages(text, { BASE: 'registry.example.com/x:1', TAG: '1' })[0]).toEqual({ ref: 'registry.example.com/x:1', line: 4 });
  });

  it('refuses a FROM without an image or with a variable nothing sets', () => {
    expect(() => baseImages('FROM\n', {})).toThrow(
      expect.objectContaining({ code: 'image.invalid_reference', details: { field: 'dockerfile', line: 1 } }),
    );
    expect(() => baseImages('FROM $NOPE\n', {})).toThrow(expect.objectContaining({ code: 'image.invalid_reference' }));
    expect(baseImages('FROM ${NOPE:-alpine}\n', {})).toEqual([{ ref: 'alpine', line: 1 }]);
  });
});
