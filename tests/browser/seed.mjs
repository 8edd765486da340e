// Seeds a fresh dpgate server through its public API for the console
// tests: datasets of every privacy unit and both accountants, rows, releases by
// two analysts, a budget raise, caps, and one dataset with a ledger of
// 10,000 entries. Tokens are minted by the server binary itself.

import { execFileSync } from 'node:child_process';

const SCHEMA = {
  features: [{ name: 'f0', min: 0, max: 1 }, { name: 'f1', min: 0, max: 10 }],
  label: 'converted',
  measures: [{ name: 'value', min: 0, max: 100 }],
  dimensions: [{ name: 'campaign', values: ['a', 'b'] }],
};

export const BIG_LEDGER = 10_000;

/** A token from `dpgate token`, signed with the server's secret. */
export function mint(role, sub, datasets = []) {
  const args = ['token', '--role', role, '--sub', sub];
  if (datasets.length) args.push('--datasets', datasets.join(','));
  return execFileSync(process.env.DPGATE_BIN, args, { encoding: 'utf8' }).trim();
}

/** The public API with one token; `send` resolves to {status, body}. */
export class Api {
  constructor(base, token) {
    this.base = base;
    this.token = token;
  }

  async send(method, path, body, contentType = 'application/json') {
    const headers = { authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers['content-type'] = contentType;
    const response = await fetch(`${this.base}${path}`, {
      method,
      headers,
      body: body === undefined || typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await response.text();
    let parsed = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // NDJSON, CSV: the caller reads the text.
    }
    return { status: response.status, body: parsed, text };
  }

  /** Like `send`, but any status other than 2xx is an error. */
  async ok(method, path, body, contentType) {
    const answer = await this.send(method, path, body, contentType);
    if (answer.status < 200 || answer.status > 299) {
      throw new Error(`${method} ${path}: ${answer.status} ${answer.text.slice(0, 500)}`);
    }
    return answer.body;
  }

  get = (path) => this.ok('GET', path);
  post = (path, body) => this.ok('POST', path, body);
  patch = (path, body) => this.ok('PATCH', path, body);

  /** Every ledger entry of a dataset, from the NDJSON export. */
  async ledger(id) {
    const { text } = await this.send('GET', `/v1/datasets/${id}/ledger?format=ndjson`);
    return text.split('\n').filter((line) => line.trim()).map((line) => JSON.parse(line));
  }
}

function rowsCsv(n, people = 0) {
  const lines = [`row_id,converted,f0,f1,value,campaign${people ? ',person' : ''}`];
  for (let i = 1; i <= n; i++) {
    const row = [`r${i}`, Number(i % 3 === 0), ((i % 11) / 10).toFixed(2), ((i * 7) % 101 / 10).toFixed(1),
      (i * 37) % 101, i % 2 ? 'a' : 'b'];
    if (people) row.push(`person-${i % people}`);
    lines.push(row.join(','));
  }
  return `${lines.join('\n')}\n`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const aggregate = (epsilon, delta) => ({
  kind: 'aggregate', epsilon, delta, statistics: ['count', 'mean:converted'], group_by: ['campaign'],
});
const walr = (epsilon, delta) => ({ kind: 'walr', epsilon, delta });

// Runs `jobs` (functions returning promises) `width` at a time.
async function concurrently(jobs, width) {
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) await jobs[next++]();
  };
  await Promise.all(Array.from({ length: width }, worker));
}

export async function seed(base) {
  const admin = new Api(base, mint('admin', 'root'));
  const create = (name, unit, accountant, budget) =>
    admin.post('/v1/datasets', { name, privacy_unit: unit, accountant, ...SCHEMA, budget });
  const ads = await create('ads-conversions', 'label', 'rdp', { epsilon: 4, delta: 1e-6 });
  const clinic = await create('clinic-visits', 'row', 'basic', { epsilon: 2, delta: 1e-5 });
  const survey = await create('survey-2026', 'label', 'rdp', { epsilon: 8, delta: 1e-6 });
  const big = await create('big-ledger', 'label', 'rdp', { epsilon: 20, delta: 1e-6 });
  // Unit `user`: 40 people of 6 rows each, at most 4 read of each.
  const people = await admin.post('/v1/datasets', {
    name: 'app-users', privacy_unit: 'user', user_column: 'person', max_rows_per_user: 4,
    max_rows_per_group_per_user: 2, accountant: 'rdp', ...SCHEMA, budget: { epsilon: 3, delta: 1e-6 },
  });
  const rows = { [ads.id]: 500, [clinic.id]: 300, [survey.id]: 120, [big.id]: 200, [people.id]: 240 };
  for (const [id, n] of Object.entries(rows)) {
    await admin.ok('POST', `/v1/datasets/${id}/rows`, rowsCsv(n, id === people.id ? 40 : 0), 'text/csv');
  }
  const granted = [ads.id, clinic.id, big.id];
  const tokens = { admin: admin.token, ana: mint('analyst', 'ana', granted), bob: mint('analyst', 'bob', granted) };
  const analysts = { ana: new Api(base, tokens.ana), bob: new Api(base, tokens.bob) };
  const release = (who, id, body) => analysts[who].post(`/v1/datasets/${id}/releases`, body);

  // ads-conversions: releases spread over a few seconds, a budget raise
  // half way, and a cap.
  const adsPlan = [
    ['ana', walr(0.6, 1e-7)], ['bob', aggregate(0.4, 1e-7)], ['ana', aggregate(0.5, 1e-7)],
    ['bob', walr(0.5, 1e-7)], 'raise', ['ana', aggregate(0.8, 1e-7)], ['bob', aggregate(0.6, 1e-7)],
    ['ana', walr(0.7, 1e-7)], 'cap', ['bob', aggregate(0.3, 1e-7)],
  ];
  for (const step of adsPlan) {
    if (step === 'raise') {
      await admin.patch(`/v1/datasets/${ads.id}/budget`, { budget: { epsilon: 6, delta: 1e-6 } });
    } else if (step === 'cap') {
      await admin.patch(`/v1/datasets/${ads.id}/budget`, { caps: { ana: { epsilon: 3.5, delta: 1e-6 } } });
    } else {
      await release(step[0], ads.id, step[1]);
    }
    await sleep(300);
  }

  // clinic-visits: basic composition, 85% spent.
  await release('ana', clinic.id, aggregate(0.9, 1e-6));
  await release('bob', clinic.id, aggregate(0.8, 1e-6));

  await seedBigLedger(admin, release, big.id);
  return { tokens, ads, clinic, survey, big, people, rows };
}

// big-ledger: releases by both analysts, caps and budget raises in four
// rounds, up to exactly BIG_LEDGER entries. Caps are the cheap entries: one
// PATCH records one entry per analyst it caps.
async function seedBigLedger(admin, release, id) {
  let entries = 1;
  const budgetSteps = [20, 26, 32, 40];
  const rounds = budgetSteps.length;
  const releasesPerRound = 60;
  const capsPerPatch = 10;
  let patch = 0;
  for (let round = 0; round < rounds; round++) {
    const releases = Array.from({ length: releasesPerRound }, (_, i) => () =>
      release(i % 3 ? 'ana' : 'bob', id, aggregate(0.05 + (i % 5) * 0.01, 1e-9)));
    await concurrently(releases, 4);
    entries += releasesPerRound;
    if (round + 1 < rounds) {
      await admin.patch(`/v1/datasets/${id}/budget`, { budget: { epsilon: budgetSteps[round + 1], delta: 1e-6 } });
      entries += 1;
    }
    const roundEnd = round + 1 === rounds ? BIG_LEDGER : Math.round((BIG_LEDGER * (round + 1)) / rounds);
    const patches = [];
    while (entries < roundEnd) {
      const k = Math.min(capsPerPatch, roundEnd - entries);
      const caps = {};
      for (let j = 0; j < k; j++) {
        caps[`team-${j}`] = { epsilon: 1 + ((patch * 7 + j) % 50) / 10, delta: 1e-7 };
      }
      patch += 1;
      entries += k;
      patches.push(() => admin.patch(`/v1/datasets/${id}/budget`, { caps }));
    }
    await concurrently(patches, 4);
  }
}
