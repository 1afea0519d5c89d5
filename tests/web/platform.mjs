// platform: the browser tests' real Cohort: a cohortd on a free loopback
// port with its own data dir, agents joined with join tokens, and the
// API calls a test makes to set the scene (tenants, users, tokens).

import { spawn, execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, openSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SOURCE_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

// A loopback port free now.
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}
import { setTimeout as sleep } from 'node:timers/promises';

export const ADMIN = 'coh_console_test_admin_token_0001';

export class Platform {
  // cohortdArgs: more options for cohortd (a bench lifts the rate limit).
  constructor({ cohortd, agent, webDir, cohortdArgs = [] }) {
    this.bins = { cohortd, agent };
    this.cohortdArgs = cohortdArgs;
    this.webDir = webDir;
    this.dir = mkdtempSync(join(tmpdir(), 'cohort-web-'));
    chmodSync(this.dir, 0o711); // the agent's image cache inside: containers' uids walk through
    this.procs = [];
    this.registryAddr = null;
    this.base = null;
  }

  async start() {
    const log = openSync(join(this.dir, 'cohortd.log'), 'a');
    const p = spawn(this.bins.cohortd, ['--listen', '127.0.0.1:0', '--data-dir', this.dir,
      '--threads', '4', '--access-log', 'off', '--web-dir', this.webDir, ...this.cohortdArgs], {
      env: { ...process.env, COHORT_ADMIN_TOKEN: ADMIN }, stdio: ['ignore', log, log],
    });
    this.procs.push(p);
    for (let i = 0; i < 500; i++) {
      if (p.exitCode !== null) throw new Error(`cohortd exited (${p.exitCode}); see ${this.dir}/cohortd.log`);
      try {
        const addr = readFileSync(join(this.dir, 'cohortd.addr'), 'utf8').trim();
        if (addr.includes(':')) {
          this.base = `http://${addr}`;
          return this;
        }
      } catch (_) { /* not yet */ }
      await sleep(20);
    }
    throw new Error('cohortd did not start within 10 s');
  }

  async api(method, path, token, body, headers = {}) {
    const h = { Authorization: `Bearer ${token}`, ...headers };
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const res = await fetch(this.base + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
    return { status: res.status, json, text, headers: res.headers };
  }

  async must(method, path, token, body, want) {
    const r = await this.api(method, path, token, body);
    if (r.status !== want) throw new Error(`${method} ${path}: want ${want}, got ${r.status} ${r.text}`);
    return r.json;
  }

  // A user of tenant (created when missing) with role; resolves to its token.
  async user(tenant, name, role) {
    const t = await this.api('POST', '/v1/tenants', ADMIN, { name: tenant });
    if (t.status !== 201 && t.status !== 409) throw new Error(`tenant ${tenant}: ${t.status} ${t.text}`);
    const u = await this.must('POST', `/v1/tenants/${tenant}/users`, ADMIN, { name, role }, 201);
    const k = await this.must('POST', `/v1/users/${u.id}/tokens`, ADMIN, { name: 'console-test' }, 201);
    return k.token;
  }

  // An OCI registry for the agents' images: docker-registry over the C
  // tests' storage of the build (BUILD/test-registry, see tests/harness.c),
  // or, when that is not there, storage of its own with the busybox image
  // the built-in images name (tests/make-test-image).
  async registry() {
    if (this.registryAddr) return this.registryAddr;
    const shared = join(dirname(this.bins.agent), 'test-registry');
    const own = !existsSync(join(shared, '.ready'));
    const root = own ? join(this.dir, 'registry') : join(shared, 'data');
    const port = await freePort();
    const addr = `127.0.0.1:${port}`;
    const conf = join(this.dir, 'registry.yml');
    writeFileSync(conf, `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${root}\nhttp:\n  addr: ${addr}\n`);
    const log = openSync(join(this.dir, 'registry.log'), 'a');
    const p = spawn('docker-registry', ['serve', conf], { stdio: ['ignore', log, log] });
    this.registryProc = p; // stopped after the others
    for (let i = 0; i < 200; i++) {
      try { if ((await fetch(`http://${addr}/v2/`)).ok) break; } catch (_) { /* not yet */ }
      if (p.exitCode !== null) throw new Error(`docker-registry exited; see ${this.dir}/registry.log`);
      await sleep(25);
    }
    if (own) execFileSync(join(SOURCE_DIR, 'tests', 'make-test-image'), [addr, 'cohort/cohort:bookworm'], { stdio: 'ignore' });
    this.registryAddr = addr;
    return addr;
  }

  async agent(name, extra = []) {
    const reg = await this.registry();
    extra = [...extra, '--registry', reg, '--insecure-registry', reg];
    const { token } = await this.must('POST', '/v1/nodes/join-tokens', ADMIN, {}, 201);
    const log = openSync(join(this.dir, `agent-${name}.log`), 'a');
    const p = spawn(this.bins.agent, ['--server', this.base, '--name', name, '--data-dir', join(this.dir, `agent-${name}`),
      '--join-token', token, '--stop-grace', '2', '--address', '127.0.0.1', ...extra], { stdio: ['ignore', log, log] });
    this.procs.push(p);
    for (let i = 0; i < 500; i++) {
      const nodes = await this.must('GET', '/v1/nodes?limit=200', ADMIN, undefined, 200);
      if (nodes.items.some((n) => n.name === name && n.state === 'up')) return;
      if (p.exitCode !== null) throw new Error(`agent ${name} exited (${p.exitCode}); see ${this.dir}/agent-${name}.log`);
      await sleep(20);
    }
    throw new Error(`agent ${name} did not join within 10 s`);
  }

  async waitJob(token, id, states, ms = 60000) {
    const until = Date.now() + ms;
    let j;
    while (Date.now() < until) {
      j = await this.must('GET', `/v1/jobs/${id}`, token, undefined, 200);
      if (states.includes(j.state)) return j;
      await sleep(100);
    }
    throw new Error(`job ${id} is ${j && j.state}, not ${states.join('|')}, after ${ms} ms`);
  }

  // Agents first, so their workers end before cohortd does.
  async stop() {
    for (const p of [...this.procs].reverse()) {
      if (p.exitCode !== null || p.signalCode !== null) continue;
      const done = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      await Promise.race([done, sleep(15000)]);
      if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    }
    const codes = this.procs.map((p) => p.exitCode);
    if (this.registryProc && this.registryProc.exitCode === null) {
      const done = new Promise((r) => this.registryProc.once('exit', r));
      this.registryProc.kill('SIGTERM');
      await Promise.race([done, sleep(5000)]);
    }
    if (!process.env.COHORT_KEEP_TEST_DIRS) rmSync(this.dir, { recursive: true, force: true });
    return codes;
  }
}
