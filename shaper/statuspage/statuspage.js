// The status page of shaper's admin port. Every second it reads
// GET v1/pipelines (and, for pipelines with lanes per key,
// GET v1/pipelines/{name}/keys?top=10), keeps each pipeline's last five
// minutes of samples itself, and draws them. Pause and resume call the
// admin API with the token typed in, exactly as curl would: the server
// decides, and the page shows its answer.
'use strict';

const pollInterval = 1000; // ms between two reads of v1/pipelines
const historySpan = 300;   // seconds of samples each chart keeps and shows
const tokenKey = 'shaper-admin-token';

// cards holds each pipeline's card and history, by pipeline name.
const cards = new Map();

const tokenInput = document.getElementById('token');
tokenInput.value = sessionStorage.getItem(tokenKey) || '';
tokenInput.addEventListener('input', () => {
  if (tokenInput.value) {
    sessionStorage.setItem(tokenKey, tokenInput.value);
  } else {
    sessionStorage.removeItem(tokenKey);
  }
});
document.getElementById('forget-token').addEventListener('click', () => {
  tokenInput.value = '';
  sessionStorage.removeItem(tokenKey);
});

// poll reads every pipeline's status, updates the cards, and schedules
// itself again; a failed read is shown, never thrown.
async function poll() {
  const connection = document.getElementById('connection');
  try {
    const statuses = await getJSON('v1/pipelines');
    const now = performance.now() / 1000;
    const seen = new Set();
    for (const status of statuses) {
      seen.add(status.name);
      const card = cardFor(status.name);
      record(card, status, now);
      render(card, status);
      if (status.key_from) {
        await showKeys(card, status);
      } else {
        card.element.querySelector('.keys').hidden = true;
      }
    }
    for (const [name, card] of cards) { // removed by a reload
      if (!seen.has(name)) {
        card.element.remove();
        cards.delete(name);
      }
    }
    connection.textContent = 'updated ' + new Date().toLocaleTimeString();
    connection.classList.remove('failed');
  } catch (err) {
    connection.textContent = 'cannot read the admin API: ' + err.message;
    connection.classList.add('failed');
  }
  setTimeout(poll, pollInterval);
}

// getJSON fetches path and returns its JSON, or throws an Error that says
// what the server answered.
async function getJSON(path) {
  const response = await fetch(path, {cache: 'no-store'});
  if (!response.ok) {
    throw new Error(response.status + ' ' + await errorText(response));
  }
  return response.json();
}

// errorText returns the message of an admin API error ({"error": "..."}),
// or the body as it is.
async function errorText(response) {
  const body = await response.text();
  try {
    return JSON.parse(body).error || body;
  } catch {
    return body;
  }
}

// cardFor returns the card of the pipeline called name, making it from
// the template the first time.
function cardFor(name) {
  let card = cards.get(name);
  if (card) {
    return card;
  }
  const element = document.getElementById('pipeline-card').content.firstElementChild.cloneNode(true);
  element.dataset.pipeline = name;
  element.querySelector('.name').textContent = name;
  card = {element, name, samples: [], previous: null};
  element.querySelector('.pause').addEventListener('click', () => change(card, 'pause'));
  element.querySelector('.resume').addEventListener('click', () => change(card, 'resume'));
  document.getElementById('pipelines').append(element);
  cards.set(name, card);
  return card;
}

// record adds a sample to the card's history: the rates in and out since
// the previous read, the depth, the limit and the capacity at now (in
// seconds). A counter that went down belongs to a pipeline made anew (a
// reload): that read starts the rates again.
function record(card, status, now) {
  const delivered = status.outcomes.delivered || 0;
  const previous = card.previous;
  card.previous = {at: now, received: status.received, delivered};
  if (!previous || status.received < previous.received || delivered < previous.delivered) {
    return;
  }
  const elapsed = now - previous.at;
  card.samples.push({
    at: now,
    received: (status.received - previous.received) / elapsed,
    delivered: (delivered - previous.delivered) / elapsed,
    depth: status.depth,
    limit: status.limit_now,
    capacity: status.capacity,
  });
  while (card.samples.length && card.samples[0].at < now - historySpan) {
    card.samples.shift();
  }
}

// render shows a status and the card's history.
function render(card, status) {
  const el = card.element;
  const set = (selector, text) => { el.querySelector(selector).textContent = text; };
  const state = el.querySelector('.state');
  state.textContent = status.state;
  state.className = 'state ' + status.state;
  el.dataset.state = status.state;
  set('.limit', status.limit_now === status.limit
    ? number(status.limit) + '/s'
    : number(status.limit_now) + '/s (configured ' + number(status.limit) + '/s)');
  set('.depth', status.depth + ' of ' + status.capacity + ' (' + status.queued + ' queued)');
  set('.oldest-wait', seconds(status.oldest_wait_seconds) + ' of ' + seconds(status.max_queue_time_seconds));
  set('.in-flight', String(status.in_flight));
  set('.outcomes', Object.entries(status.outcomes).map(([outcome, n]) => outcome + ' ' + n).join(', '));
  set('.not-ready', status.ready ? '' : 'not ready: ' + status.not_ready);
  drawChart(card);
}

// drawChart draws the card's history: rates against one scale (the
// highest rate or limit of the span), depth against the capacity. The
// newest sample is at the right edge; x counts seconds.
function drawChart(card) {
  const figure = card.element.querySelector('.chart');
  const samples = card.samples;
  const last = samples[samples.length - 1];
  if (!last) {
    return;
  }
  const rateTop = Math.max(1, ...samples.map(s => Math.max(s.received, s.delivered, s.limit))) * 1.1;
  const depthTop = Math.max(1, ...samples.map(s => s.capacity));
  const x = s => (historySpan - (last.at - s.at)).toFixed(1);
  const y = (value, top) => (100 - 100 * Math.min(value, top) / top).toFixed(1);
  const line = (field, top) => samples.map(s => x(s) + ',' + y(s[field], top)).join(' ');
  figure.querySelector('.received-line').setAttribute('points', line('received', rateTop));
  figure.querySelector('.delivered-line').setAttribute('points', line('delivered', rateTop));
  figure.querySelector('.depth-line').setAttribute('points', line('depth', depthTop));
  const limitLine = figure.querySelector('.limit-line');
  limitLine.setAttribute('y1', y(last.limit, rateTop));
  limitLine.setAttribute('y2', y(last.limit, rateTop));

  figure.dataset.receivedPerSecond = last.received.toFixed(1);
  figure.dataset.deliveredPerSecond = last.delivered.toFixed(1);
  figure.dataset.depth = String(last.depth);
  figure.querySelector('.received-per-second').textContent = number(last.received);
  figure.querySelector('.delivered-per-second').textContent = number(last.delivered);
  figure.querySelector('.depth-now').textContent = String(last.depth);
  figure.querySelector('.scale').textContent =
    'top: ' + number(rateTop) + '/s, depth ' + depthTop + ' · last 5 minutes';
}

// showKeys lists the pipeline's deepest lanes.
async function showKeys(card, status) {
  const table = card.element.querySelector('.keys');
  const keys = await getJSON('v1/pipelines/' + encodeURIComponent(status.name) + '/keys?top=10');
  table.querySelector('.key-from').textContent = 'key.from ' + status.key_from;
  const rows = keys.map(k => {
    const row = document.createElement('tr');
    for (const text of [k.key === '' ? '(no key)' : k.key, String(k.depth), seconds(k.oldest_wait_seconds), k.limit ? number(k.limit) + '/s' : '–']) {
      row.append(cell(text));
    }
    return row;
  });
  table.querySelector('tbody').replaceChildren(...rows);
  table.hidden = false;
}

function cell(text) {
  const td = document.createElement('td');
  td.textContent = text;
  return td;
}

// change asks the admin API to pause or resume the card's pipeline with
// the token typed in, and says what the server answered. Without a token
// the request goes without one: the server refuses it, as it would curl.
async function change(card, action) {
  const answer = card.element.querySelector('.answer');
  const headers = {};
  if (tokenInput.value) {
    headers.Authorization = 'Bearer ' + tokenInput.value;
  }
  answer.className = 'answer';
  answer.textContent = action + '…';
  try {
    const response = await fetch('v1/pipelines/' + encodeURIComponent(card.name) + '/' + action, {method: 'POST', headers});
    if (!response.ok) {
      answer.textContent = action + ' refused (' + response.status + '): ' + await errorText(response);
      answer.classList.add('refused');
      return;
    }
    const status = await response.json();
    render(card, status);
    answer.textContent = action + 'd';
  } catch (err) {
    answer.textContent = action + ' failed: ' + err.message;
    answer.classList.add('refused');
  }
}

// number writes a rate with at most one decimal.
function number(n) {
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

// seconds writes a wait in seconds, with hundredths below 10 s.
function seconds(s) {
  return s < 10 ? s.toFixed(2) + ' s' : s.toFixed(0) + ' s';
}

poll();
