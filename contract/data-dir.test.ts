import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CONTROL_PLANE_PIDFILE, controlPlanePidfile, dataDirLayout, formatPidfile, parsePidfile, processIdentity } from './data-dir.js';

describe('data dir layout and pidfiles', () => {
  it('names the paths set-up and the control plane use', () => {
    expect(dataDirLayout('/d')).toEqual({
      redisSocket: '/d/redis-socket/redis.sock',
      redisPassword: '/d/redis/password',
      redisConf: '/d/redis/redis.conf',
      redisPidfile: '/d/redis/redis.pid',
      controlPlaneRunDir: '/d/run',
    });
    expect(controlPlanePidfile('/d', 42)).toBe('/d/run/control-plane.42.pid');
    expect(CONTROL_PLANE_PIDFILE.exec('control-plane.42.pid')?.[1]).toBe('42');
  });

  it('a process is known by pid and start time; one that exited is not running', () => {
    const self = processIdentity(process.pid);
    expect(self?.startTicks).toMatch(/^\d+$/);
    expect(parsePidfile(formatPidfile(self!))).toEqual(self);
    expect(parsePidfile('12\n')).toBeNull();
    const exited = spawnSync('true').pid;
    expect(processIdentity(exited)).toBeNull();
  });
});
