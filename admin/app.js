// The dpgate admin console: one page over the public API, with the token
// the admin pastes. It has no powers the API does not give that token.
//
// Everything untrusted (names, actors, problem details) reaches the page as
// text nodes or attribute values, never as markup, and the server's
// Content-Security-Policy forbids inline script and style: so the DOM is
// built with the `h` and `svg` helpers below, and colours come from classes.

const TOKEN_KEY = 'dpgate.admin.token';
const LEDGER_PAGE = 100;
const RELEASES_PAGE = 100;
const NEAR_EXHAUSTION = 0.8;
// Profile points between these δ, log-spaced, plus the dataset's own δ.
const PROFILE_DELTAS = { from: 1e-12, to: 1e-1, count: 25 };
// Above this many points a marker per point would be thinner than a pixel
// (and slow to draw): a crosshair shows the point nearest the pointer
// instead.
const DENSE_POINTS = 400;
// Analysts drawn on their own when the burn chart is split; the rest share
// one line.
const ANALYST_LINES = 6;

// ---------------------------------------------------------------- DOM ----

const SVG_NS = 'http://www.w3.org/2000/svg';

function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  setAttributes(element, attrs);
  element.append(...children.flat().filter((child) => child != null && child !== false));
  return element;
}

function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  setAttributes(element, attrs);
  element.append(...children.flat().filter((child) => child != null && child !== false));
  return element;
}

function setAttributes(element, attrs) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else {
      element.setAttribute(name, value === true ? '' : String(value));
    }
  }
}

const byId = (id) => document.getElementById(id);

// ---------------------------------------------------------------- API ----

/** A refused or failed call, carrying the problem document's fields. */
class Problem extends Error {
  constructor(status, title, detail) {
    super(detail || title);
    this.status = status;
    this.title = title;
    this.detail = detail;
  }
}

async function call(path, { method = 'GET', body, accept = 'application/json' } = {}) {
  const headers = { accept, authorization: `Bearer ${session.token()}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch (error) {
    throw new Problem(0, 'The server could not be reached', String(error.message || error));
  }
  if (!response.ok) throw await problemOf(response);
  return response;
}

async function problemOf(response) {
  const text = await response.text();
  try {
    const problem = JSON.parse(text);
    return new Problem(response.status, problem.title || response.statusText, problem.detail || '');
  } catch {
    return new Problem(response.status, response.statusText, text.slice(0, 300));
  }
}

const getJson = async (path) => (await call(path)).json();

const api = {
  datasets: () => getJson('/v1/datasets'),
  dataset: (id) => getJson(`/v1/datasets/${id}`),
  releases: (id, after) =>
    getJson(`/v1/datasets/${id}/releases?limit=${RELEASES_PAGE}${after == null ? '' : `&after=${after}`}`),
  ledgerPage: (id, after) =>
    getJson(`/v1/datasets/${id}/ledger?limit=${LEDGER_PAGE}${after == null ? '' : `&after=${after}`}`),
  async ledger(id) {
    const response = await call(`/v1/datasets/${id}/ledger?format=ndjson`, {
      accept: 'application/x-ndjson',
    });
    const text = await response.text();
    const entries = [];
    for (const line of text.split('\n')) {
      if (line.trim()) entries.push(JSON.parse(line));
    }
    return entries;
  },
  profile: (id, deltas) =>
    getJson(`/v1/datasets/${id}/privacy-profile?deltas=${deltas.map(String).join(',')}`),
  verify: async (id) => (await call(`/v1/datasets/${id}/ledger/verify`, { method: 'POST' })).json(),
  setCap: async (id, analyst, cap) =>
    (await call(`/v1/datasets/${id}/budget`, { method: 'PATCH', body: { caps: { [analyst]: cap } } })).json(),
};

// ------------------------------------------------------------ session ----

const session = {
  token: () => sessionStorage.getItem(TOKEN_KEY),
  signIn: (token) => sessionStorage.setItem(TOKEN_KEY, token),
  signOut: () => sessionStorage.removeItem(TOKEN_KEY),
  // For the header only: the server checks the token on every call, so
  // what the payload claims decides nothing here.
  claims() {
    try {
      const payload = this.token().split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      return JSON.parse(atob(payload));
    } catch {
      return {};
    }
  },
};

// --------------------------------------------------------- formatting ----

function formatEpsilon(value) {
  if (value == null || Number.isNaN(value)) return '–';
  if (value === 0) return '0';
  if (Math.abs(value) >= 1000) return value.toFixed(0);
  if (Math.abs(value) < 1e-3) return value.toExponential(2);
  return String(Number(value.toPrecision(4)));
}

function formatDelta(value) {
  if (value == null) return '–';
  if (value === 0) return '0';
  const [mantissa, exponent] = value.toExponential(2).split('e');
  return `${mantissa.replace(/\.?0+$/, '')}e${exponent.replace('+', '')}`;
}

const formatCount = (value) => Number(value).toLocaleString('en-US');

function formatPercent(fraction) {
  if (!Number.isFinite(fraction)) return '–';
  return `${(fraction * 100).toFixed(fraction < 0.1 ? 1 : 0)}%`;
}

function formatTime(rfc3339) {
  const time = new Date(rfc3339);
  if (Number.isNaN(time.getTime())) return rfc3339;
  return `${time.toISOString().slice(0, 19).replace('T', ' ')}Z`;
}

const SUPERSCRIPT = { '-': '⁻', 0: '⁰', 1: '¹', 2: '²', 3: '³', 4: '⁴', 5: '⁵', 6: '⁶', 7: '⁷', 8: '⁸', 9: '⁹' };
const powerOfTen = (exponent) => `10${[...String(exponent)].map((c) => SUPERSCRIPT[c]).join('')}`;

const fraction = (spent, total) => (total > 0 ? spent / total : spent > 0 ? Infinity : 0);

// ---------------------------------------------------------- the shell ----

function showNotice(text, kind = 'info') {
  const notice = byId('notice');
  notice.className = `notice ${kind}`;
  notice.textContent = text;
  notice.hidden = !text;
}

function setCrumbs(...crumbs) {
  byId('crumbs').replaceChildren(
    ...crumbs.flatMap((crumb, i) => [
      ...(i > 0 ? [h('span', { class: 'crumb-sep', 'aria-hidden': 'true' }, '›')] : []),
      crumb.href ? h('a', { href: crumb.href }, crumb.text) : h('span', {}, crumb.text),
    ]),
  );
}

function showSignIn(problem) {
  byId('who').hidden = true;
  byId('sign-in').hidden = false;
  byId('view').replaceChildren();
  setCrumbs();
  showNotice('');
  const shown = byId('sign-in-problem');
  shown.hidden = !problem;
  shown.textContent = problem ? describe(problem) : '';
  byId('token').focus();
}

function showSignedIn() {
  const claims = session.claims();
  byId('sign-in').hidden = true;
  byId('who').hidden = false;
  byId('who-name').textContent = `${claims.sub ?? 'unknown'} · ${claims.role ?? 'unknown role'}`;
  if (claims.role && claims.role !== 'admin') {
    showNotice(
      `This is an ${claims.role} token: the API refuses it the ledger, its verification and budget changes.`,
      'warning',
    );
  } else {
    showNotice('');
  }
}

function describe(problem) {
  if (!(problem instanceof Problem)) return String(problem?.message ?? problem);
  const status = problem.status ? `${problem.status} ` : '';
  return problem.detail ? `${status}${problem.title}: ${problem.detail}` : `${status}${problem.title}`;
}

function problemView(problem) {
  return h('p', { class: 'problem', role: 'alert', 'data-status': problem?.status ?? 0 }, describe(problem));
}

async function signIn(event) {
  event.preventDefault();
  const token = byId('token').value.trim().replace(/^Bearer\s+/i, '');
  if (!token) return;
  session.signIn(token);
  try {
    await api.datasets();
  } catch (problem) {
    session.signOut();
    showSignIn(problem);
    return;
  }
  byId('token').value = '';
  route();
}

function signOut() {
  session.signOut();
  if (location.hash && location.hash !== '#/') location.hash = '#/';
  showSignIn();
}

// ------------------------------------------------------------- routing ----

// Each render owns a fresh page element; a slow render of a page the admin
// has already left fills an element that is no longer shown.
function mount(page) {
  byId('view').replaceChildren(page);
  return page;
}

function route() {
  if (!session.token()) {
    showSignIn();
    return;
  }
  showSignedIn();
  const match = /^#\/datasets\/([0-9a-fA-F-]{36})$/.exec(location.hash);
  if (match) {
    datasetPage(match[1]);
  } else {
    datasetsPage();
  }
}

// ------------------------------------------------------ datasets page ----

const DATASET_COLUMNS = [
  { key: 'name', label: 'Name', value: (d) => d.name.toLowerCase() },
  { key: 'unit', label: 'Unit', value: (d) => d.privacy_unit },
  { key: 'n', label: 'N', value: (d) => d.n_rows, numeric: true, right: true },
  { key: 'accountant', label: 'Accountant', value: (d) => d.accountant },
  { key: 'spent', label: 'ε spent / budget', value: (d) => fraction(d.spent.epsilon, d.budget.epsilon), numeric: true },
  { key: 'basic', label: 'ε basic', value: (d) => d.spent.epsilon_basic, numeric: true, right: true },
  { key: 'remaining', label: 'ε left', value: (d) => d.remaining.epsilon, numeric: true, right: true },
];

async function datasetsPage() {
  setCrumbs({ text: 'Datasets' });
  const page = mount(h('div', { class: 'page', 'data-page': 'datasets' }, h('p', { class: 'muted' }, 'Loading…')));
  let datasets;
  try {
    ({ datasets } = await api.datasets());
  } catch (problem) {
    page.replaceChildren(problemView(problem));
    page.dataset.ready = 'true';
    return;
  }
  const sort = { key: 'spent', descending: true };
  const table = h('table', { class: 'table datasets' });
  const draw = () => table.replaceChildren(datasetsHead(sort, draw), datasetsBody(datasets, sort));
  draw();
  const near = datasets.filter((d) => fraction(d.spent.epsilon, d.budget.epsilon) > NEAR_EXHAUSTION).length;
  page.replaceChildren(
    h(
      'div',
      { class: 'page-head' },
      h('h1', {}, 'Datasets'),
      h(
        'p',
        { class: 'muted' },
        `${formatCount(datasets.length)} datasets; ${near} above ${NEAR_EXHAUSTION * 100}% of their ε spent (highlighted). `,
        'The bar is ε spent under the dataset’s accountant; the tick on it, and the figure beside it, what basic composition would have spent.',
      ),
    ),
    datasets.length
      ? h('div', { class: 'card flush' }, h('div', { class: 'table-scroll' }, table))
      : h('p', { class: 'card empty' }, 'No datasets yet. Create one with POST /v1/datasets.'),
  );
  page.dataset.ready = 'true';
}

function datasetsHead(sort, redraw) {
  const cells = DATASET_COLUMNS.map((column) => {
    const sorted = sort.key === column.key;
    const button = h(
      'button',
      {
        type: 'button',
        class: 'sort',
        'data-sort': column.key,
        onclick: () => {
          sort.descending = sorted ? !sort.descending : column.numeric === true;
          sort.key = column.key;
          redraw();
        },
      },
      column.label,
      h('span', { class: 'sort-mark', 'aria-hidden': 'true' }, sorted ? (sort.descending ? '▼' : '▲') : ''),
    );
    return h(
      'th',
      { class: column.right ? 'num' : null, 'aria-sort': sorted ? (sort.descending ? 'descending' : 'ascending') : 'none' },
      button,
    );
  });
  return h('thead', {}, h('tr', {}, cells));
}

function datasetsBody(datasets, sort) {
  const column = DATASET_COLUMNS.find((c) => c.key === sort.key);
  const ordered = [...datasets].sort((a, b) => {
    const [x, y] = [column.value(a), column.value(b)];
    const order = x < y ? -1 : x > y ? 1 : 0;
    return sort.descending ? -order : order;
  });
  return h(
    'tbody',
    {},
    ordered.map((d) => {
      const spent = fraction(d.spent.epsilon, d.budget.epsilon);
      return h(
        'tr',
        { 'data-id': d.id, class: spent > NEAR_EXHAUSTION ? 'near-exhaustion' : null },
        h('td', {}, h('a', { href: `#/datasets/${d.id}` }, d.name)),
        h('td', {}, h('span', { class: `tag unit-${d.privacy_unit}` }, d.privacy_unit)),
        h('td', { class: 'num', 'data-n': d.n_rows }, formatCount(d.n_rows)),
        h('td', {}, d.accountant),
        h('td', { class: 'budget-cell' }, budgetBar(d)),
        h('td', { class: 'num', title: `δ basic ${formatDelta(d.spent.delta_basic)}` }, formatEpsilon(d.spent.epsilon_basic)),
        h('td', { class: 'num' }, formatEpsilon(d.remaining.epsilon)),
      );
    }),
  );
}

function budgetBar(d) {
  const spent = Math.min(1, fraction(d.spent.epsilon, d.budget.epsilon));
  const basic = Math.min(1, fraction(d.spent.epsilon_basic, d.budget.epsilon));
  const level = spent > NEAR_EXHAUSTION ? 'high' : spent > 0.5 ? 'mid' : 'low';
  return h(
    'div',
    { class: 'bar-wrap' },
    svg(
      'svg',
      { class: `bar ${level}`, viewBox: '0 0 100 10', preserveAspectRatio: 'none', role: 'img',
        'aria-label': `${formatPercent(spent)} of ε spent` },
      svg('title', {}, `ε ${d.spent.epsilon} of ${d.budget.epsilon} spent (${d.accountant}); basic would be ${d.spent.epsilon_basic}`),
      svg('rect', { class: 'bar-track', x: 0, y: 0, width: 100, height: 10 }),
      svg('rect', { class: 'bar-fill', x: 0, y: 0, width: (spent * 100).toFixed(2), height: 10 }),
      svg('line', { class: 'bar-basic', x1: basic * 100, x2: basic * 100, y1: 0, y2: 10 }),
    ),
    h(
      'span',
      { class: 'bar-text' },
      `${formatEpsilon(d.spent.epsilon)} / ${formatEpsilon(d.budget.epsilon)}`,
      h('span', { class: 'muted' }, ` (${formatPercent(fraction(d.spent.epsilon, d.budget.epsilon))})`),
    ),
  );
}

// ------------------------------------------------------- dataset page ----

function datasetPage(id) {
  setCrumbs({ text: 'Datasets', href: '#/' }, { text: 'Dataset' });
  const page = mount(h('div', { class: 'page', 'data-page': 'dataset', 'data-id': id }, h('p', { class: 'muted' }, 'Loading…')));
  return fillDataset(page, id);
}

// Fills `page` with the dataset's sections, each loading on its own (an
// analyst token is refused the ledger but may still see the rest).
async function fillDataset(page, id) {
  let dataset;
  try {
    dataset = await api.dataset(id);
  } catch (problem) {
    page.replaceChildren(problemView(problem));
    page.dataset.ready = 'true';
    return;
  }
  setCrumbs({ text: 'Datasets', href: '#/' }, { text: dataset.name });
  const reload = () => reloadDataset(page, id);
  const sections = {
    burn: section('burn', 'Budget burn', 'Cumulative ε spent after each ledger entry, and the total budget.'),
    profile: section('profile', 'Privacy profile', 'ε of everything released so far, as a function of δ.'),
    analysts: section('analysts', 'Analysts', 'Spending and caps (a cap bounds what one analyst may spend).'),
    releases: section('releases', 'Releases', null),
    ledger: section('ledger', 'Ledger', 'Every entry is hash-chained to the one before it.'),
  };
  page.replaceChildren(
    summary(dataset),
    h('div', { class: 'grid-2' }, sections.burn, sections.profile),
    sections.analysts,
    sections.releases,
    sections.ledger,
  );
  await Promise.allSettled([
    fill(sections.burn, async () => burnChart(await api.ledger(id), dataset)),
    fill(sections.profile, async () => profileChart(dataset, await api.profile(id, profileDeltas(dataset)))),
    fill(sections.analysts, async () => analystsTable(dataset, reload)),
    fill(sections.releases, async () => releasesTable(id, await api.releases(id))),
    fill(sections.ledger, async () => ledgerTable(id, await api.ledgerPage(id), [])),
  ]);
  page.dataset.ready = 'true';
}

// After a change, draw the page anew off screen and swap it in whole, so the
// admin keeps their place on it.
async function reloadDataset(page, id) {
  const fresh = h('div', { class: 'page', 'data-page': 'dataset', 'data-id': id });
  await fillDataset(fresh, id);
  if (page.isConnected) page.replaceWith(fresh);
  return fresh;
}

function section(name, title, note) {
  return h(
    'section',
    { class: 'card', 'data-section': name },
    h('div', { class: 'section-head' }, h('h2', {}, title), note ? h('p', { class: 'muted' }, note) : null),
    h('div', { class: 'section-body' }, h('p', { class: 'muted' }, 'Loading…')),
  );
}

async function fill(element, build) {
  const body = element.querySelector('.section-body');
  try {
    body.replaceChildren(await build());
  } catch (problem) {
    body.replaceChildren(problemView(problem));
  }
  element.dataset.ready = 'true';
}

function summary(d) {
  const spent = fraction(d.spent.epsilon, d.budget.epsilon);
  const figure = (label, value, note) =>
    h('div', { class: 'figure' }, h('div', { class: 'figure-label' }, label), h('div', { class: 'figure-value' }, value), note ? h('div', { class: 'figure-note' }, note) : null);
  return h(
    'div',
    { class: `summary${spent > NEAR_EXHAUSTION ? ' near-exhaustion' : ''}` },
    h(
      'div',
      { class: 'summary-title' },
      h('h1', {}, d.name),
      h('p', { class: 'muted mono' }, d.id),
      h('p', {}, h('span', { class: `tag unit-${d.privacy_unit}` }, `unit: ${d.privacy_unit}`), ' ', h('span', { class: 'tag' }, `accountant: ${d.accountant}`)),
      contributionBounds(d),
    ),
    h(
      'div',
      { class: 'figures' },
      figure('Rows (N)', formatCount(d.n_rows), null),
      figure('Budget', `ε ${formatEpsilon(d.budget.epsilon)}`, `δ ${formatDelta(d.budget.delta)}`),
      figure(`Spent (${d.accountant})`, `ε ${formatEpsilon(d.spent.epsilon)}`, `δ ${formatDelta(d.spent.delta)} · ${formatPercent(spent)} of ε`),
      figure('Spent (basic)', `ε ${formatEpsilon(d.spent.epsilon_basic)}`, `δ ${formatDelta(d.spent.delta_basic)}`),
      figure('Remaining', `ε ${formatEpsilon(d.remaining.epsilon)}`, `δ ${formatDelta(d.remaining.delta)}`),
    ),
  );
}

// Unit `user`: whose rows a person is, and what one person may add to a
// release (public bounds; the rows beyond them are dropped on read).
function contributionBounds(d) {
  const b = d.contribution_bounds;
  if (!b) return null;
  return h(
    'p',
    { class: 'contribution-bounds' },
    h('span', { class: 'tag' }, `user column: ${d.user_column}`), ' ',
    h('span', { class: 'tag' }, `≤ ${formatCount(b.max_rows_per_user)} rows a person`), ' ',
    h('span', { class: 'tag' }, `≤ ${formatCount(b.max_groups_per_user)} groups a person`), ' ',
    h('span', { class: 'tag' }, `≤ ${formatCount(b.max_rows_per_group_per_user)} rows a person in a group`),
  );
}

// ------------------------------------------------------------- charts ----

const CHART = { width: 640, height: 320, margin: { top: 14, right: 20, bottom: 50, left: 58 } };

function linear([d0, d1], [r0, r1]) {
  const k = d1 === d0 ? 0 : (r1 - r0) / (d1 - d0);
  return (value) => r0 + (value - d0) * k;
}

// Round steps (1, 2 or 5 × 10^k) about `count` to the span.
function niceStep(span, count) {
  const raw = span / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const error = raw / magnitude;
  return (error >= 7.5 ? 10 : error >= 3.5 ? 5 : error >= 1.5 ? 2 : 1) * magnitude;
}

function niceDomain(max, count = 5) {
  const top = max > 0 ? max * 1.04 : 1;
  const step = niceStep(top, count);
  const end = Math.ceil(top / step) * step;
  const ticks = [];
  for (let i = 0; i * step <= end + step * 1e-9; i++) ticks.push(Number((i * step).toPrecision(12)));
  return { end, ticks };
}

const SECOND = 1000;
const TIME_STEPS = [
  1, 2, 5, 10, 20, 50, 100, 200, 500,
  SECOND, 2 * SECOND, 5 * SECOND, 10 * SECOND, 15 * SECOND, 30 * SECOND,
  60 * SECOND, 120 * SECOND, 300 * SECOND, 600 * SECOND, 900 * SECOND, 1800 * SECOND,
  3600 * SECOND, 7200 * SECOND, 10800 * SECOND, 21600 * SECOND, 43200 * SECOND,
  86400 * SECOND, 2 * 86400 * SECOND, 7 * 86400 * SECOND, 30 * 86400 * SECOND, 91 * 86400 * SECOND,
  365 * 86400 * SECOND,
];

function timeTicks(t0, t1, count = 6) {
  const step = TIME_STEPS.find((candidate) => (t1 - t0) / candidate <= count) ?? TIME_STEPS.at(-1);
  const ticks = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) ticks.push(t);
  const iso = (t) => new Date(t).toISOString();
  const format =
    step < SECOND ? (t) => iso(t).slice(11, step >= 100 ? 21 : step >= 10 ? 22 : 23)
      : step < 60 * SECOND ? (t) => iso(t).slice(11, 19)
        : step < 86400 * SECOND ? (t) => iso(t).slice(11, 16)
          : (t) => iso(t).slice(0, 10);
  return { ticks, format };
}

function timeLabel(t0, t1) {
  const [a, b] = [new Date(t0).toISOString().slice(0, 10), new Date(t1).toISOString().slice(0, 10)];
  return a === b ? `time (UTC), ${a}` : `time (UTC), ${a} to ${b}`;
}

// The frame of a chart: grid, axes, ticks, their labels and the axis titles.
function axes({ x, y, xTicks, yTicks, xFormat, yFormat, xLabel, yLabel }) {
  const { width, height, margin } = CHART;
  const [left, right, top, bottom] = [margin.left, width - margin.right, margin.top, height - margin.bottom];
  return svg(
    'g',
    { class: 'axes' },
    yTicks.map((tick) =>
      svg('g', { class: 'tick y' },
        svg('line', { class: 'grid', x1: left, x2: right, y1: y(tick), y2: y(tick) }),
        svg('text', { x: left - 8, y: y(tick), 'dominant-baseline': 'middle', 'text-anchor': 'end' }, yFormat(tick)))),
    xTicks.map((tick) =>
      svg('g', { class: 'tick x' },
        svg('line', { class: 'grid', x1: x(tick), x2: x(tick), y1: top, y2: bottom }),
        svg('line', { class: 'tick-mark', x1: x(tick), x2: x(tick), y1: bottom, y2: bottom + 5 }),
        svg('text', { x: x(tick), y: bottom + 18, 'text-anchor': 'middle' }, xFormat(tick)))),
    svg('line', { class: 'axis', x1: left, x2: right, y1: bottom, y2: bottom }),
    svg('line', { class: 'axis', x1: left, x2: left, y1: top, y2: bottom }),
    svg('text', { class: 'axis-title', x: (left + right) / 2, y: height - 8, 'text-anchor': 'middle' }, xLabel),
    svg('text', { class: 'axis-title', x: 0, y: 0, transform: `translate(14 ${(top + bottom) / 2}) rotate(-90)`, 'text-anchor': 'middle' }, yLabel),
  );
}

function chartFrame(label, ...content) {
  return svg('svg', { class: 'chart', viewBox: `0 0 ${CHART.width} ${CHART.height}`, role: 'img', 'aria-label': label }, ...content);
}

function legend(items) {
  return h(
    'ul',
    { class: 'legend' },
    items.map(({ series, label }) => h('li', { 'data-series': series }, h('span', { class: `swatch ${series}`, 'aria-hidden': 'true' }), label)),
  );
}

// A step line through `points` ({x, y} in pixels): flat until the next
// point, as a budget or a running total is.
function stepPath(points) {
  if (!points.length) return '';
  const parts = [`M${points[0].x.toFixed(1)},${points[0].y.toFixed(1)}`];
  for (let i = 1; i < points.length; i++) {
    parts.push(`H${points[i].x.toFixed(1)}V${points[i].y.toFixed(1)}`);
  }
  return parts.join('');
}

// One series: its line, and (unless dense) a marker with a tooltip for
// each point. `data-points` and `data-last` say what it was drawn from.
function series(name, points, { step = true, markers = true, last } = {}) {
  const path = step
    ? stepPath(points)
    : points.map((p, i) => `${i ? 'L' : 'M'}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join('');
  const group = svg('g', { class: `series ${name}`, 'data-series': name, 'data-points': points.length, 'data-last': last },
    svg('path', { class: 'line', d: path }));
  if (markers && points.length <= DENSE_POINTS) {
    group.append(svg('g', { class: 'markers' }, points.map((point) =>
      svg('circle', { class: 'point', cx: point.x.toFixed(1), cy: point.y.toFixed(1), r: 3.5, ...point.attrs },
        svg('title', {}, point.title)))));
  }
  return group;
}

// The crosshair of a dense chart: the entry nearest the pointer, its dots
// on the lines, and its description in a box.
function crosshair(times, x, t, lines, describe) {
  const { width, height, margin } = CHART;
  const [left, right, top, bottom] = [margin.left, width - margin.right, margin.top, height - margin.bottom];
  const rule = svg('line', { class: 'crosshair', y1: top, y2: bottom });
  const dots = lines.map(({ name }) => svg('circle', { class: `hover-dot ${name}`, r: 4 }));
  const box = svg('rect', { class: 'tooltip-box', rx: 4, y: top + 4 });
  const text = svg('text', { class: 'tooltip-text' });
  const readout = svg('g', { class: 'hover', visibility: 'hidden' }, rule, dots, box, text);
  const capture = svg('rect', { class: 'hover-capture', x: left, y: top, width: right - left, height: bottom - top });
  capture.addEventListener('pointermove', (event) => {
    const pointer = new DOMPoint(event.clientX, event.clientY).matrixTransform(capture.getScreenCTM().inverse());
    const i = nearest(times, t(pointer.x));
    const px = x(times[i]);
    for (const attribute of ['x1', 'x2']) rule.setAttribute(attribute, px);
    lines.forEach(({ y }, k) => {
      dots[k].setAttribute('cx', px);
      dots[k].setAttribute('cy', y(i));
    });
    text.replaceChildren(...describe(i).split('\n').map((line, k) =>
      svg('tspan', { x: 0, dy: k ? 15 : 0 }, line)));
    readout.setAttribute('visibility', 'visible');
    const size = text.getBBox();
    const boxWidth = size.width + 16;
    const boxX = px + 12 + boxWidth <= right ? px + 12 : px - 12 - boxWidth;
    box.setAttribute('x', boxX);
    box.setAttribute('width', boxWidth);
    box.setAttribute('height', size.height + 12);
    for (const tspan of text.children) tspan.setAttribute('x', boxX + 8);
    text.setAttribute('y', top + 4 + 6 - size.y);
  });
  capture.addEventListener('pointerleave', () => readout.setAttribute('visibility', 'hidden'));
  return svg('g', { class: 'crosshair-layer' }, readout, capture);
}

// The last index whose time is at most `t`, or the next one if nearer:
// entries made together show the state after all of them.
function nearest(times, t) {
  let [lo, hi] = [0, times.length - 1];
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (times[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const next = lo + 1 < times.length ? lo + 1 : lo;
  return Math.abs(times[next] - t) < Math.abs(t - times[lo]) ? next : lo;
}

// ------------------------------------------------------- burn chart ----

function burnChart(ledger, dataset) {
  // The server leaves the figures out after an entry it cannot read: the
  // chart stops there, and says so.
  const unread = ledger.findIndex((entry) => !entry.spent_after || !entry.budget_after);
  const entries = unread < 0 ? ledger : ledger.slice(0, unread);
  if (!entries.length) return h('p', { class: 'problem' }, 'No ledger entry says what was spent after it.');
  const times = entries.map((entry) => Date.parse(entry.created_at));
  const analysts = new Set(entries.filter((e) => e.event === 'release').map((e) => e.actor));
  const holder = h('div', { class: 'chart-holder' });
  let split = false;
  const draw = () => holder.replaceChildren(...drawBurn(entries, times, dataset, split));
  const toggle = h('label', { class: 'toggle' },
    h('input', { type: 'checkbox', 'data-toggle': 'split', onchange: (event) => { split = event.target.checked; draw(); } }),
    ' Split by analyst (basic ε of each one’s releases)');
  draw();
  return h('div', {},
    h('div', { class: 'chart-tools' }, analysts.size ? toggle : null,
      h('span', { class: 'muted' }, `${formatCount(entries.length)} ledger entries`)),
    unread < 0 ? null : h('p', { class: 'problem' },
      `Drawn up to entry ${ledger[unread].seq - 1}: the server could not read the ledger from entry ${ledger[unread].seq} on (verify the chain).`),
    holder);
}

function drawBurn(entries, times, dataset, split) {
  const { width, height, margin } = CHART;
  let [t0, t1] = [times[0], times.at(-1)];
  if (t1 - t0 < 1000) [t0, t1] = [t0 - 500, t1 + 500];
  const top = Math.max(...entries.map((e) => Math.max(e.budget_after.epsilon, e.spent_after.epsilon, e.spent_after.epsilon_basic)));
  const yDomain = niceDomain(top);
  const x = linear([t0, t1], [margin.left, width - margin.right]);
  const y = linear([0, yDomain.end], [height - margin.bottom, margin.top]);
  const time = timeTicks(t0, t1);

  const describeEntry = (entry) => {
    const release = entry.event === 'release' ? ` (ε ${formatEpsilon(entry.epsilon)}, δ ${formatDelta(entry.delta)})` : '';
    return `#${entry.seq} ${entry.event}${release} by ${entry.actor}\n${formatTime(entry.created_at)}\n` +
      `spent ε ${formatEpsilon(entry.spent_after.epsilon)} (${dataset.accountant}), ${formatEpsilon(entry.spent_after.epsilon_basic)} (basic)\n` +
      `budget ε ${formatEpsilon(entry.budget_after.epsilon)}`;
  };
  const dense = entries.length > DENSE_POINTS;
  const at = (value) => (entry, i) => ({
    x: x(times[i]), y: y(value(entry)), title: dense ? null : describeEntry(entry),
  });
  const budget = entries.map(at((e) => e.budget_after.epsilon));
  const accountant = entries.map(at((e) => e.spent_after.epsilon));
  const basic = entries.map(at((e) => e.spent_after.epsilon_basic));
  const last = entries.at(-1);

  const layers = [
    series('budget', budget, { markers: false, last: last.budget_after.epsilon }),
    series('basic', basic, { last: last.spent_after.epsilon_basic }),
    series('accountant', accountant, { last: last.spent_after.epsilon }),
  ];
  const items = [
    { series: 'accountant', label: `spent ε (${dataset.accountant})` },
    { series: 'basic', label: 'spent ε (basic composition)' },
    { series: 'budget', label: 'budget ε (raises are steps)' },
  ];
  if (split) {
    for (const [i, line] of analystLines(entries, times).entries()) {
      const points = line.points.map(({ t, value }) => ({ x: x(t), y: y(value) }));
      points.push({ x: x(t1), y: points.at(-1).y });
      layers.push(series(`analyst a${i}`, points, { markers: false, last: line.total }));
      items.push({ series: `a${i}`, label: `${line.analyst} (basic)` });
    }
  }
  if (dense) {
    const t = (px) => t0 + ((px - margin.left) / (width - margin.left - margin.right)) * (t1 - t0);
    layers.push(crosshair(times, x, t, [
      { name: 'accountant', y: (i) => accountant[i].y },
      { name: 'basic', y: (i) => basic[i].y },
    ], (i) => describeEntry(entries[i])));
  }
  return [
    legend(items),
    chartFrame(
      'Budget burn: cumulative ε spent over time',
      axes({ x, y, xTicks: time.ticks, yTicks: yDomain.ticks, xFormat: time.format, yFormat: formatEpsilon, xLabel: timeLabel(t0, t1), yLabel: 'ε (cumulative)' }),
      layers,
    ),
  ];
}

// Each analyst's running basic ε over their own release entries; beyond
// ANALYST_LINES analysts, the smallest spenders share one line.
function analystLines(entries, times) {
  const totals = new Map();
  for (const entry of entries) {
    if (entry.event === 'release') totals.set(entry.actor, (totals.get(entry.actor) ?? 0) + entry.epsilon);
  }
  const ranked = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a));
  const own = new Set(ranked.length > ANALYST_LINES ? ranked.slice(0, ANALYST_LINES - 1) : ranked);
  const lines = new Map();
  entries.forEach((entry, i) => {
    if (entry.event !== 'release') return;
    const name = own.has(entry.actor) ? entry.actor : `${ranked.length - own.size} others`;
    const line = lines.get(name) ?? { analyst: name, total: 0, points: [{ t: times[0], value: 0 }] };
    line.total += entry.epsilon;
    line.points.push({ t: times[i], value: line.total });
    lines.set(name, line);
  });
  return [...lines.values()];
}

// ---------------------------------------------------- profile chart ----

function profileDeltas(dataset) {
  const { from, to, count } = PROFILE_DELTAS;
  const [a, b] = [Math.log10(from), Math.log10(to)];
  const deltas = Array.from({ length: count }, (_, i) => 10 ** (a + ((b - a) * i) / (count - 1)));
  if (dataset.budget.delta > 0) deltas.push(dataset.budget.delta);
  return [...new Set(deltas)].sort((p, q) => p - q);
}

function profileChart(dataset, profile) {
  const { width, height, margin } = CHART;
  const points = profile.points.filter((point) => point.epsilon != null && point.delta > 0);
  const unreachable = profile.points.length - points.length;
  // The ledger's own point is on the whole ledger's curve, not on the one
  // of an analyst's own releases (what an analyst token is shown).
  const own = profile.analyst == null && dataset.budget.delta > 0
    ? { delta: dataset.budget.delta, epsilon: dataset.spent.epsilon }
    : null;
  if (!points.length) return h('p', { class: 'muted' }, 'No δ in range gives a finite ε.');
  const deltas = points.map((p) => p.delta).concat(own ? [own.delta] : []);
  const [lo, hi] = [Math.floor(Math.log10(Math.min(...deltas))), Math.ceil(Math.log10(Math.max(...deltas)))];
  const yDomain = niceDomain(Math.max(own?.epsilon ?? 0, ...points.map((p) => p.epsilon)));
  const logX = linear([lo, hi], [margin.left, width - margin.right]);
  const x = (delta) => logX(Math.log10(delta));
  const y = linear([0, yDomain.end], [height - margin.bottom, margin.top]);
  const decades = Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
  const step = Math.ceil(decades.length / 8);
  const xTicks = decades.filter((_, i) => i % step === 0);

  const curve = points.map((point) => ({
    x: x(point.delta),
    y: y(point.epsilon),
    title: `δ = ${formatDelta(point.delta)}: ε = ${formatEpsilon(point.epsilon)}`,
    attrs: { 'data-delta': point.delta, 'data-epsilon': point.epsilon },
  }));
  const layers = [series('profile', curve, { step: false, last: points.at(-1).epsilon })];
  const whose = profile.analyst == null ? '' : ` of ${profile.analyst}’s releases`;
  const items = [{ series: 'profile', label: `ε(δ)${whose} under ${profile.accountant}` }];
  if (own) {
    const [px, py] = [x(own.delta), y(own.epsilon)];
    layers.push(
      svg('g', { class: 'ledger-point', 'data-delta': own.delta, 'data-epsilon': own.epsilon },
        svg('line', { class: 'guide', x1: px, x2: px, y1: height - margin.bottom, y2: py }),
        svg('line', { class: 'guide', x1: margin.left, x2: px, y1: py, y2: py }),
        svg('path', { class: 'diamond', d: `M${px},${py - 7}L${px + 7},${py}L${px},${py + 7}L${px - 7},${py}Z` },
          svg('title', {}, `The ledger's spent ε at its budget δ: δ = ${formatDelta(own.delta)}, ε = ${formatEpsilon(own.epsilon)}`)),
        svg('text', { x: px + 10, y: py - 10, class: 'point-label', 'text-anchor': px > width * 0.7 ? 'end' : 'start' },
          `spent: ε ${formatEpsilon(own.epsilon)} at δ ${formatDelta(own.delta)}`)),
    );
    items.push({ series: 'ledger-point', label: 'the ledger’s (ε spent, δ of the budget)' });
  }
  return h('div', {},
    legend(items),
    chartFrame(
      'Privacy profile: ε as a function of δ',
      axes({ x: logX, y, xTicks, yTicks: yDomain.ticks, xFormat: powerOfTen, yFormat: formatEpsilon, xLabel: 'δ (log scale)', yLabel: 'ε' }),
      layers,
    ),
    unreachable ? h('p', { class: 'muted' }, `${unreachable} δ with no finite ε are left out.`) : null);
}

// ---------------------------------------------------------- analysts ----

function analystsTable(dataset, reload) {
  const status = h('p', { class: 'form-status', role: 'status' });
  const save = async (analyst, cap, row) => {
    for (const button of row.querySelectorAll('button')) button.disabled = true;
    status.replaceChildren();
    try {
      await api.setCap(dataset.id, analyst, cap);
      const fresh = await reload();
      const shown = fresh.querySelector('[data-section="analysts"] .form-status');
      shown?.replaceChildren(h('span', { class: 'ok' }, cap ? `Cap of ${analyst} set to ε ${cap.epsilon}, δ ${cap.delta}.` : `Cap of ${analyst} removed.`));
    } catch (problem) {
      status.replaceChildren(problemView(problem));
      for (const button of row.querySelectorAll('button')) button.disabled = false;
    }
  };
  const capInputs = (cap) => ({
    epsilon: h('input', { type: 'number', min: 0, step: 'any', class: 'cap-epsilon', 'aria-label': 'cap ε', placeholder: 'ε', value: cap?.epsilon }),
    delta: h('input', { type: 'number', min: 0, step: 'any', class: 'cap-delta', 'aria-label': 'cap δ', placeholder: 'δ',
      value: (cap?.delta ?? dataset.budget.delta).toExponential() }),
  });
  const readCap = (inputs) => {
    const [epsilon, delta] = [inputs.epsilon.value.trim(), inputs.delta.value.trim()];
    if (epsilon === '' || delta === '') throw new Problem(0, 'A cap needs both ε and δ', 'use “Remove” to lift a cap');
    return { epsilon: Number(epsilon), delta: Number(delta) };
  };
  const submit = (row, analyst, inputs) => {
    try {
      save(analyst(), readCap(inputs), row);
    } catch (problem) {
      status.replaceChildren(problemView(problem));
    }
  };

  const rows = dataset.analysts.map((a) => {
    const inputs = capInputs(a.cap);
    const row = h('tr', { 'data-analyst': a.analyst });
    row.append(
      h('td', {}, a.analyst),
      h('td', { class: 'num' }, formatEpsilon(a.spent.epsilon)),
      h('td', { class: 'num' }, formatEpsilon(a.spent.epsilon_basic)),
      h('td', { class: 'num' }, formatDelta(a.spent.delta)),
      h('td', { class: 'cap-now' }, a.cap ? `ε ${formatEpsilon(a.cap.epsilon)}, δ ${formatDelta(a.cap.delta)}` : 'none'),
      h('td', { class: 'cap-edit' },
        inputs.epsilon, inputs.delta,
        h('button', { type: 'button', class: 'button primary small', 'data-action': 'save', onclick: () => submit(row, () => a.analyst, inputs) }, 'Save'),
        a.cap ? h('button', { type: 'button', class: 'button subtle small', 'data-action': 'remove', onclick: () => save(a.analyst, null, row) }, 'Remove') : null),
    );
    return row;
  });
  const newInputs = capInputs(null);
  const name = h('input', { type: 'text', class: 'cap-analyst', placeholder: 'analyst (token subject)', 'aria-label': 'analyst' });
  const addRow = h('tr', { class: 'add-cap' });
  addRow.append(
    h('td', { colspan: 5 }, name),
    h('td', { class: 'cap-edit' }, newInputs.epsilon, newInputs.delta,
      h('button', { type: 'button', class: 'button small', 'data-action': 'add', onclick: () => submit(addRow, () => name.value.trim(), newInputs) }, 'Cap')),
  );
  return h('div', {},
    h('div', { class: 'table-scroll tall' },
      h('table', { class: 'table analysts' },
        h('thead', {}, h('tr', {},
          h('th', {}, 'Analyst'), h('th', { class: 'num' }, `ε (${dataset.accountant})`), h('th', { class: 'num' }, 'ε basic'),
          h('th', { class: 'num' }, 'δ'), h('th', {}, 'Cap'), h('th', {}, 'Set cap (ε, δ)'))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No analyst has spent or been capped yet.')), addRow))),
    status);
}

// ---------------------------------------------------------- releases ----

function releasesTable(id, first) {
  const body = h('tbody');
  const more = h('button', { type: 'button', class: 'button small' }, 'Show more');
  const count = h('span', { class: 'muted' });
  let shown = 0;
  const add = (page) => {
    body.append(...page.releases.map((r) =>
      h('tr', {},
        h('td', { class: 'nowrap' }, formatTime(r.created_at)),
        h('td', {}, h('span', { class: 'tag' }, r.kind)),
        h('td', {}, r.analyst),
        h('td', { class: 'num' }, formatEpsilon(r.epsilon)),
        h('td', { class: 'num' }, formatDelta(r.delta)),
        h('td', { class: 'num' }, r.seq),
        h('td', { class: 'mono', title: r.id }, r.id.slice(0, 8)))));
    shown += page.releases.length;
    count.textContent = `${formatCount(shown)} shown${page.next_after == null ? '' : ', more below'}`;
    more.hidden = page.next_after == null;
    more.onclick = async () => {
      more.disabled = true;
      try {
        add(await api.releases(id, page.next_after));
      } catch (problem) {
        more.replaceWith(problemView(problem));
      }
      more.disabled = false;
    };
  };
  add(first);
  if (!shown) return h('p', { class: 'muted' }, 'No releases yet.');
  return h('div', {},
    h('div', { class: 'table-scroll tall' },
      h('table', { class: 'table releases' },
        h('thead', {}, h('tr', {}, ['Time', 'Kind', 'Analyst', 'ε', 'δ', 'Ledger #', 'Id'].map((label, i) => h('th', { class: i >= 3 && i <= 5 ? 'num' : null }, label)))),
        body)),
    h('div', { class: 'table-foot' }, count, more));
}

// ------------------------------------------------------------ ledger ----

function ledgerTable(id, page, cursors) {
  const banner = h('div', { class: 'verify-result', role: 'status', hidden: true });
  const verify = h('button', { type: 'button', class: 'button primary', 'data-action': 'verify' }, 'Verify chain');
  verify.addEventListener('click', async () => {
    verify.disabled = true;
    banner.hidden = false;
    banner.className = 'verify-result pending';
    banner.textContent = 'Verifying…';
    try {
      showVerification(banner, await api.verify(id));
    } catch (problem) {
      banner.className = 'verify-result';
      banner.replaceChildren(problemView(problem));
    }
    verify.disabled = false;
  });
  const holder = h('div', {});
  const show = (shownPage, shownCursors) => holder.replaceChildren(ledgerPage(id, shownPage, shownCursors, show));
  show(page, cursors);
  return h('div', {}, h('div', { class: 'chart-tools' }, verify), banner, holder);
}

function showVerification(banner, result) {
  banner.dataset.intact = String(result.intact);
  banner.dataset.entries = result.entries;
  if (result.intact) {
    banner.className = 'verify-result ok';
    banner.replaceChildren(h('strong', {}, 'OK'), ` — the chain is intact: all ${formatCount(result.entries)} entries verify.`);
  } else {
    banner.className = 'verify-result broken';
    banner.dataset.breakSeq = result.break.seq;
    banner.replaceChildren(
      h('strong', {}, `BROKEN at entry ${result.break.seq}`),
      ` — ${result.break.reason}. The entries before it verify; nothing from it on can be trusted.`,
    );
  }
}

function ledgerPage(id, page, cursors, show) {
  const go = async (after, nextCursors, button) => {
    button.disabled = true;
    try {
      show(await api.ledgerPage(id, after), nextCursors);
    } catch (problem) {
      button.replaceWith(problemView(problem));
    }
  };
  const previous = h('button', { type: 'button', class: 'button small', 'data-action': 'previous', disabled: !cursors.length }, '← Previous');
  previous.addEventListener('click', () => go(cursors.at(-1), cursors.slice(0, -1), previous));
  const next = h('button', { type: 'button', class: 'button small', 'data-action': 'next', disabled: page.next_after == null }, 'Next →');
  next.addEventListener('click', () => go(page.next_after, [...cursors, afterOf(page)], next));
  const [first, last] = [page.entries[0]?.seq, page.entries.at(-1)?.seq];
  return h('div', {},
    h('div', { class: 'table-scroll tall' },
      h('table', { class: 'table ledger', 'data-first': first, 'data-last': last },
        h('thead', {}, h('tr', {}, ['#', 'Event', 'Actor', 'ε', 'δ', 'Spent ε after', 'Time', 'What', 'Hash'].map((label, i) =>
          h('th', { class: [0, 3, 4, 5].includes(i) ? 'num' : null }, label)))),
        h('tbody', {}, page.entries.map(ledgerRow)))),
    h('div', { class: 'table-foot' },
      h('span', { class: 'muted' }, page.entries.length ? `entries ${first}–${last}` : 'no entries'),
      h('span', { class: 'pager' }, previous, next)));
}

// The cursor that shows `page` again: the seq just before its first entry.
function afterOf(page) {
  const first = page.entries[0]?.seq ?? 0;
  return first === 0 ? undefined : first - 1;
}

function ledgerRow(entry) {
  const spent = entry.spent_after;
  return h('tr', {},
    h('td', { class: 'num' }, entry.seq),
    h('td', {}, h('span', { class: `tag event-${entry.event}` }, entry.event)),
    h('td', {}, entry.actor),
    h('td', { class: 'num' }, formatEpsilon(entry.epsilon)),
    h('td', { class: 'num' }, formatDelta(entry.delta)),
    h('td', { class: 'num', title: spent ? `basic ${spent.epsilon_basic}` : null },
      spent ? formatEpsilon(spent.epsilon) : '–',
      spent ? h('span', { class: 'muted small' }, ` / ${formatEpsilon(spent.epsilon_basic)}`) : null),
    h('td', { class: 'nowrap' }, formatTime(entry.created_at)),
    h('td', { class: 'small' }, entryNote(entry)),
    h('td', { class: 'mono', title: entry.hash }, entry.hash.slice(0, 10)));
}

function entryNote(entry) {
  const details = entry.details ?? {};
  switch (entry.event) {
    case 'release':
      return entry.release_id ? `release ${entry.release_id.slice(0, 8)}` : '';
    case 'cap':
      return details.cap
        ? `cap ${details.analyst}: ε ${formatEpsilon(details.cap.epsilon)}, δ ${formatDelta(details.cap.delta)}`
        : `cap of ${details.analyst} removed`;
    case 'budget':
      return details.from && details.to ? `budget ε ${formatEpsilon(details.from.epsilon)} → ${formatEpsilon(details.to.epsilon)}` : 'budget';
    case 'open':
      return details.budget ? `created, budget ε ${formatEpsilon(details.budget.epsilon)}, δ ${formatDelta(details.budget.delta)}` : 'created';
    default:
      return '';
  }
}

// -------------------------------------------------------------- start ----

byId('sign-in-form').addEventListener('submit', signIn);
byId('sign-out').addEventListener('click', signOut);
window.addEventListener('hashchange', route);
route();
