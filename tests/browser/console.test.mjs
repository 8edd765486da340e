// The admin console in headless chromium, against the real server that
// tests/browser/run.sh started (DPGATE_URL) and this file seeds.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { Api, BIG_LEDGER, seed } from './seed.mjs';

const BASE = process.env.DPGATE_URL;
const OUT = process.env.BROWSER_OUT;
const SHOTS = join(OUT, 'screenshots');
// playwright-core lives in target/browser (install.sh), not beside this file.
const { chromium } = createRequire(join(OUT, 'package.json'))('playwright-core');

let context;
let page;
let profileDir;
let world;
const admin = () => new Api(BASE, world.tokens.admin);
const pageErrors = [];

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  const started = performance.now();
  world = await seed(BASE);
  console.log(`seeded in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  profileDir = mkdtempSync(join(tmpdir(), 'dpgate-chromium-'));
  context = await chromium.launchPersistentContext(profileDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1360, height: 900 },
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(20_000);
  page.on('pageerror', (error) => pageErrors.push(`uncaught: ${error.message}`));
  page.on('console', (message) => {
    if (/Content.Security.Policy/i.test(message.text())) pageErrors.push(`CSP: ${message.text()}`);
  });
});

after(async () => {
  await context?.close();
  if (profileDir) rmSync(profileDir, { recursive: true, force: true });
});

const shot = (name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

async function signIn(token) {
  await page.goto(`${BASE}/admin#/`);
  if (await page.locator('#sign-out').isVisible()) await page.click('#sign-out');
  await page.fill('#token', token);
  await page.click('#sign-in-form button[type=submit]');
}

async function openDataset(id) {
  await page.evaluate((target) => { location.hash = `#/datasets/${target}`; }, id);
  await page.locator(`[data-page="dataset"][data-id="${id}"][data-ready]`).waitFor();
}

const attribute = (selector, name) => page.locator(selector).first().getAttribute(name);
const near = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b));

test('the page runs under its Content-Security-Policy: an injected inline script does not run', async () => {
  const response = await page.goto(`${BASE}/admin`);
  assert.match(response.headers()['content-security-policy'], /script-src 'self'/);
  await page.locator('#sign-in-form').waitFor();
  const reported = page.waitForEvent('console', {
    predicate: (message) => /Content.Security.Policy/i.test(message.text()),
    timeout: 5_000,
  });
  const ran = await page.evaluate(() => {
    const script = document.createElement('script');
    script.textContent = 'window.injected = true';
    document.head.append(script);
    return window.injected === true;
  });
  assert.equal(ran, false);
  await reported;
  pageErrors.length = 0; // the violation just provoked is the one expected
});

test('sign in: a bad token shows the API’s 401, an admin token shows the datasets', async () => {
  await page.goto(`${BASE}/admin`);
  await shot('sign-in');
  await signIn('not-a-token');
  const problem = page.locator('#sign-in-problem');
  await problem.waitFor();
  assert.match(await problem.textContent(), /^401 /);
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);

  await signIn(world.tokens.admin);
  await page.locator('[data-page="datasets"][data-ready]').waitFor();
  const stored = await page.evaluate(() => Object.values(sessionStorage));
  assert.deepEqual(stored, [world.tokens.admin]);
  assert.equal(await page.evaluate(() => document.cookie), '');
  assert.ok(!page.url().includes(world.tokens.admin));
  await shot('datasets');
});

test('the datasets table: every dataset with its N, the ones above 80% spent highlighted, sortable', async () => {
  const { datasets } = await admin().get('/v1/datasets');
  const rows = page.locator('table.datasets tbody tr');
  assert.equal(await rows.count(), datasets.length);
  for (const dataset of datasets) {
    const row = page.locator(`table.datasets tr[data-id="${dataset.id}"]`);
    assert.equal(Number(await row.locator('td[data-n]').getAttribute('data-n')), dataset.n_rows);
    assert.equal(await row.locator('a').textContent(), dataset.name);
    const highlighted = (await row.getAttribute('class') ?? '').includes('near-exhaustion');
    assert.equal(highlighted, dataset.spent.epsilon / dataset.budget.epsilon > 0.8, dataset.name);
  }
  assert.equal(await page.locator('tr.near-exhaustion').count(), 1);
  assert.equal(await attribute('tr.near-exhaustion', 'data-id'), world.clinic.id);

  const shownN = async () => (await page.locator('table.datasets td[data-n]').evaluateAll(
    (cells) => cells.map((cell) => Number(cell.dataset.n))));
  await page.click('button.sort[data-sort="n"]');
  const descending = await shownN();
  assert.deepEqual(descending, [...descending].sort((a, b) => b - a));
  await page.click('button.sort[data-sort="n"]');
  const ascending = await shownN();
  assert.deepEqual(ascending, [...ascending].sort((a, b) => a - b));
  assert.deepEqual(new Set(ascending), new Set(Object.values(world.rows)));
});

test('a dataset with releases and a budget raise: one burn point per entry, the last at the API’s spent ε', async () => {
  await page.click(`a[href="#/datasets/${world.ads.id}"]`);
  await page.locator(`[data-page="dataset"][data-id="${world.ads.id}"][data-ready]`).waitFor();
  const dataset = await admin().get(`/v1/datasets/${world.ads.id}`);
  const entries = await admin().ledger(world.ads.id);
  assert.ok(entries.some((entry) => entry.event === 'budget'), 'the seed raised the budget');

  const burn = '[data-section="burn"]';
  assert.equal(Number(await attribute(`${burn} .series.accountant`, 'data-points')), entries.length);
  assert.equal(Number(await attribute(`${burn} .series.basic`, 'data-points')), entries.length);
  assert.equal(await page.locator(`${burn} .series.accountant circle.point`).count(), entries.length);
  assert.equal(Number(await attribute(`${burn} .series.accountant`, 'data-last')), dataset.spent.epsilon);
  assert.equal(Number(await attribute(`${burn} .series.basic`, 'data-last')), dataset.spent.epsilon_basic);
  assert.equal(Number(await attribute(`${burn} .series.budget`, 'data-last')), dataset.budget.epsilon);
  assert.match(await page.locator(`${burn} .series.accountant circle.point title`).last().textContent(), /^#\d+ /);

  const releases = await admin().get(`/v1/datasets/${world.ads.id}/releases`);
  assert.equal(await page.locator('[data-section="releases"] tbody tr').count(), releases.releases.length);
  await shot('dataset');

  // Split by analyst: each line ends at that analyst's basic ε.
  await page.check(`${burn} input[data-toggle="split"]`);
  for (const analyst of ['ana', 'bob']) {
    const spent = entries.filter((e) => e.event === 'release' && e.actor === analyst).reduce((sum, e) => sum + e.epsilon, 0);
    const line = page.locator(`${burn} .legend li`, { hasText: `${analyst} (basic)` });
    const series = (await line.getAttribute('data-series'));
    assert.ok(near(Number(await attribute(`${burn} .series.${series}`, 'data-last')), spent), analyst);
  }
  await page.locator(burn).screenshot({ path: join(SHOTS, 'burn-by-analyst.png') });
  await page.uncheck(`${burn} input[data-toggle="split"]`);
});

test('the privacy profile passes through the ledger’s (ε spent, δ of the budget)', async () => {
  const dataset = await admin().get(`/v1/datasets/${world.ads.id}`);
  const profile = '[data-section="profile"]';
  const marker = page.locator(`${profile} g.ledger-point`);
  assert.equal(Number(await marker.getAttribute('data-delta')), dataset.budget.delta);
  assert.equal(Number(await marker.getAttribute('data-epsilon')), dataset.spent.epsilon);

  const curve = await page.locator(`${profile} .series.profile circle.point`).evaluateAll(
    (points) => points.map((point) => ({ delta: Number(point.dataset.delta), epsilon: Number(point.dataset.epsilon) })));
  assert.ok(curve.length >= 20, `${curve.length} points on the curve`);
  const at = curve.find((point) => near(point.delta, dataset.budget.delta));
  assert.ok(at, 'the curve has a point at δ of the budget');
  assert.ok(near(at.epsilon, dataset.spent.epsilon), `ε(δ_total) = ${at.epsilon}, spent ε = ${dataset.spent.epsilon}`);
  for (let i = 1; i < curve.length; i++) {
    assert.ok(curve[i].delta > curve[i - 1].delta && curve[i].epsilon <= curve[i - 1].epsilon, 'ε falls as δ grows');
  }
});

test('a cap edit round-trips through PATCH /budget, and a refusal shows the problem’s detail', async () => {
  const analysts = '[data-section="analysts"]';
  const row = () => page.locator(`${analysts} tr[data-analyst="bob"]`);
  await row().locator('.cap-epsilon').fill('1.5');
  await row().locator('.cap-delta').fill('1e-7');
  await row().locator('[data-action="save"]').click();
  await page.locator(`${analysts} .form-status .ok`).waitFor();
  const dataset = await admin().get(`/v1/datasets/${world.ads.id}`);
  assert.deepEqual(dataset.analysts.find((a) => a.analyst === 'bob').cap, { epsilon: 1.5, delta: 1e-7 });
  assert.match(await row().locator('.cap-now').textContent(), /ε 1\.5, δ 1e-7/);

  const refused = await admin().send('PATCH', `/v1/datasets/${world.ads.id}/budget`, { caps: { bob: { epsilon: -1, delta: 1e-7 } } });
  assert.equal(refused.status, 422);
  await row().locator('.cap-epsilon').fill('-1');
  await row().locator('[data-action="save"]').click();
  const problem = page.locator(`${analysts} .form-status .problem[data-status="422"]`);
  await problem.waitFor();
  assert.ok((await problem.textContent()).includes(refused.body.detail), await problem.textContent());
  await page.locator(analysts).screenshot({ path: join(SHOTS, 'analysts.png') });
});

test('verify shows OK, and BROKEN at the entry tampered with in the database', async () => {
  const ledger = '[data-section="ledger"]';
  await openDataset(world.ads.id);
  const entries = await admin().ledger(world.ads.id);
  await page.click(`${ledger} [data-action="verify"]`);
  await page.locator(`${ledger} .verify-result.ok`).waitFor();
  assert.equal(Number(await attribute(`${ledger} .verify-result`, 'data-entries')), entries.length);
  assert.match(await page.locator(`${ledger} .verify-result`).textContent(), /^OK/);

  const tampered = entries.find((entry) => entry.event === 'release' && entry.seq >= 3).seq;
  tamper(world.ads.id, tampered);
  await page.click(`${ledger} [data-action="verify"]`);
  const broken = page.locator(`${ledger} .verify-result.broken`);
  await broken.waitFor();
  assert.equal(Number(await broken.getAttribute('data-break-seq')), tampered);
  assert.match(await broken.textContent(), new RegExp(`^BROKEN at entry ${tampered}`));
  await page.locator(ledger).screenshot({ path: join(SHOTS, 'ledger-broken.png') });
});

// Rewrites who made entry `seq` of the dataset, behind the server's back
// (the append-only trigger dropped first, as an attacker with the file could).
function tamper(datasetId, seq) {
  execFileSync('python3', ['-c', `
import sqlite3, sys
db, dataset, seq = sys.argv[1], sys.argv[2], int(sys.argv[3])
connection = sqlite3.connect(db, timeout=30)
connection.execute("DROP TRIGGER IF EXISTS ledger_is_append_only_on_update")
changed = connection.execute(
    "UPDATE ledger SET actor = 'mallory' WHERE seq = ? AND dataset_pk = (SELECT pk FROM datasets WHERE id = ?)",
    (seq, dataset)).rowcount
connection.commit()
sys.exit(0 if changed == 1 else 1)
`, process.env.DPGATE_DB, datasetId, String(seq)]);
}

test('an analyst token is refused the admin calls: the 403 is shown', async () => {
  await signIn(world.tokens.ana);
  await page.locator('[data-page="datasets"][data-ready]').waitFor();
  assert.match(await page.locator('#notice').textContent(), /analyst token/);
  await openDataset(world.ads.id);
  const refused = await new Api(BASE, world.tokens.ana).send('GET', `/v1/datasets/${world.ads.id}/ledger`);
  assert.equal(refused.status, 403);
  for (const section of ['ledger', 'burn']) {
    const problem = page.locator(`[data-section="${section}"] .problem[data-status="403"]`);
    assert.ok((await problem.textContent()).includes(refused.body.detail), section);
  }
  await shot('analyst-refused');
});

test(`a dataset with ${BIG_LEDGER} ledger entries renders (timing printed)`, async (t) => {
  await signIn(world.tokens.admin);
  await page.locator('[data-page="datasets"][data-ready]').waitFor();
  const entries = await admin().ledger(world.big.id);
  assert.equal(entries.length, BIG_LEDGER);
  const timings = [];
  for (let run = 0; run < 3; run++) {
    await page.evaluate(() => { location.hash = '#/'; });
    await page.locator('[data-page="datasets"][data-ready]').waitFor();
    timings.push(await page.evaluate(async (id) => {
      const started = performance.now();
      location.hash = `#/datasets/${id}`;
      await new Promise((resolve) => {
        const ready = () => document.querySelector(`[data-page="dataset"][data-id="${id}"][data-ready]`);
        const poll = () => (ready() ? resolve() : requestAnimationFrame(poll));
        poll();
      });
      // One more frame: styled, laid out and painted.
      await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
      return performance.now() - started;
    }, world.big.id));
  }
  const report = `console load + render of ${BIG_LEDGER} ledger entries: ` +
    `${timings.map((ms) => `${ms.toFixed(0)} ms`).join(', ')} (first is cold)`;
  console.log(report);
  t.diagnostic(report);
  writeFileSync(join(OUT, 'timing.txt'), `${report}\n`);

  const dataset = await admin().get(`/v1/datasets/${world.big.id}`);
  const burn = '[data-section="burn"]';
  assert.equal(Number(await attribute(`${burn} .series.accountant`, 'data-points')), BIG_LEDGER);
  assert.equal(Number(await attribute(`${burn} .series.accountant`, 'data-last')), dataset.spent.epsilon);
  await page.screenshot({ path: join(SHOTS, 'big-ledger.png') });

  // Too many points for a marker each: a crosshair reads out the nearest entry.
  const plot = await page.locator(`${burn} .hover-capture`).boundingBox();
  await page.mouse.move(plot.x + plot.width * 0.6, plot.y + plot.height / 2);
  const readout = page.locator(`${burn} g.hover`);
  assert.equal(await readout.getAttribute('visibility'), 'visible');
  assert.match(await readout.locator('text').textContent(), /^#\d+ /);
  await page.locator(burn).screenshot({ path: join(SHOTS, 'big-ledger-burn.png') });
  await page.mouse.move(0, 0);

  const ledger = '[data-section="ledger"]';
  assert.equal(Number(await attribute(`${ledger} table.ledger`, 'data-first')), 0);
  await page.click(`${ledger} [data-action="next"]`);
  await page.locator(`${ledger} table.ledger[data-first="100"]`).waitFor();
  assert.equal(await page.locator(`${ledger} table.ledger tbody tr`).count(), 100);
  await page.click(`${ledger} [data-action="previous"]`);
  await page.locator(`${ledger} table.ledger[data-first="0"]`).waitFor();
});

test('a dataset of unit user shows its user column and contribution bounds', async () => {
  await openDataset(world.ads.id);
  assert.equal(await page.locator('.contribution-bounds').count(), 0);
  await openDataset(world.people.id);
  const shown = `[data-page="dataset"][data-id="${world.people.id}"]`;
  assert.equal(await page.locator(`${shown} .tag.unit-user`).textContent(), 'unit: user');
  const bounds = await page.locator(`${shown} .contribution-bounds .tag`).allTextContents();
  assert.deepEqual(bounds, [
    'user column: person', '≤ 4 rows a person', '≤ 4 groups a person', '≤ 2 rows a person in a group',
  ]);
  await shot('dataset-unit-user');
});

test('no script error and no Content-Security-Policy violation on any page', () => {
  assert.deepEqual(pageErrors, []);
});
