// The connection wizard of `pubsub-connector serve`: pick connector -> profile (test, save
// or pick a saved one) -> table (autocomplete) -> columns -> test (server-sent events) ->
// create -> the CREATE TABLE statement; beside them, "Check a pipeline" (its SQL planned by
// the server, each table's columns shown). The forms are rendered from the JSON Schemas of
// GET /v1/connectors by json-editor (vendor/jsoneditor.js, a global `JSONEditor`); the
// REST API is docs/rest-api.md. No network beyond this server, no build step.

const API = '/v1'
const STEPS = ['connector', 'profile', 'table', 'columns', 'test', 'done']

const state = {
  connector: null, // the entry of GET /v1/connectors
  profile: null, // the saved profile in use (reply of POST/GET /v1/connection_profiles)
  profiles: [], // saved profiles
  editors: { profile: null, table: null, columns: null },
  schemas: { profile: null, source: null, sink: null, columns: null },
  tableType: 'source',
  step: 'connector',
  started: false // the connector list loaded (the token, if any, was accepted)
}

const $ = (sel, root = document) => root.querySelector(sel)
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel))

// ---------------------------------------------------------------------------------------
// Schemas: the committed schemas as json-editor renders them well and offline.

/** Deep copy of JSON. */
const clone = (v) => JSON.parse(JSON.stringify(v))

/**
 * The schema as json-editor should render it: `$ref`s inlined (no remote or even local
 * resolution by the library), one-element `allOf` merged, nullable `anyOf`/`type` arrays
 * made optional (unset = null), string `oneOf`s of consts made selects with titles,
 * consts made hidden fixed values, examples made placeholders, secrets password inputs,
 * and `format: autocomplete` made a `<datalist>` (`x-autocomplete`: topics|subscriptions).
 */
/** `b` over `a`, with the two objects' `properties` and `required` united. */
function merge (a, b) {
  const out = { ...a, ...b }
  if (a.properties || b.properties) out.properties = { ...(a.properties || {}), ...(b.properties || {}) }
  if (a.required || b.required) out.required = [...new Set([...(a.required || []), ...(b.required || [])])]
  return out
}

function prepare (root) {
  const defs = root.definitions || {}
  const resolve = (s) => {
    let guard = 0
    while (s && s.$ref && guard++ < 32) {
      const name = s.$ref.replace(/^#\/definitions\//, '')
      if (!(name in defs)) throw new Error(`schema: unknown $ref ${s.$ref}`)
      const rest = { ...s }
      delete rest.$ref
      s = { ...clone(defs[name]), ...rest }
    }
    return s
  }
  const walk = (s) => {
    if (typeof s !== 'object' || s === null) return s
    s = resolve(clone(s))
    if (Array.isArray(s.allOf) && s.allOf.length === 1) {
      const inner = walk(s.allOf[0])
      const rest = { ...s }
      delete rest.allOf
      s = merge(inner, rest)
    }
    if (Array.isArray(s.anyOf)) {
      const some = s.anyOf.filter((x) => x.type !== 'null')
      if (some.length === 1 && some.length < s.anyOf.length) {
        const rest = { ...s }
        delete rest.anyOf
        s = { ...walk(some[0]), ...rest }
      }
    }
    if (Array.isArray(s.type)) {
      const t = s.type.filter((x) => x !== 'null')
      if (t.length === 1) s.type = t[0]
    }
    if (s.default === null) delete s.default
    // Objects: their fields carry their own defaults (a default object would also set
    // the optional fields it lists).
    if (s.type === 'object' && s.default && typeof s.default === 'object') delete s.default
    s.options = { ...(s.options || {}) }
    // A choice among constant strings: a select with the variants' titles.
    if (Array.isArray(s.oneOf) && s.oneOf.every((o) => o && 'const' in o && typeof o.const === 'string')) {
      const variants = s.oneOf
      delete s.oneOf
      s.type = 'string'
      s.enum = variants.map((o) => o.const)
      s.options.enum_titles = variants.map((o) => o.title || o.const)
      const help = variants.map((o) => `${o.title || o.const}: ${(o.description || '').replace(/\s+/g, ' ')}`)
      s.description = [s.description, ...help].filter(Boolean).join('\n')
    }
    if (Array.isArray(s.oneOf)) s.oneOf = s.oneOf.map(walk)
    if (s.properties) {
      for (const k of Object.keys(s.properties)) s.properties[k] = walk(s.properties[k])
      // A required text field starts empty rather than absent, so a blank one reaches the
      // server's checks and its error names the field.
      for (const k of s.required || []) {
        const p = s.properties[k]
        if (p && p.type === 'string' && !p.enum && !('default' in p)) p.default = ''
      }
      // Required fields first, then the rest in schema order.
      const req = new Set(s.required || [])
      let order = 1
      for (const k of Object.keys(s.properties)) {
        if (req.has(k)) s.properties[k].propertyOrder = order++
      }
      for (const k of Object.keys(s.properties)) {
        if (!req.has(k)) s.properties[k].propertyOrder = 100 + order++
      }
    }
    if (s.items && !Array.isArray(s.items)) {
      s.items = walk(s.items)
      if (!s.items.title && s.title) s.items.title = s.title.replace(/s$/, '')
    }
    if ('const' in s) {
      // A variant's tag (`"type": "emulator"`): fixed and not shown.
      s.enum = [s.const]
      s.default = s.const
      s.options.hidden = true
      delete s.const
    }
    const attrs = { ...(s.options.inputAttributes || {}) }
    if (Array.isArray(s.examples) && s.examples.length && typeof s.examples[0] !== 'object') {
      attrs.placeholder = `e.g. ${s.examples[0]}`
    }
    if (s['x-sensitive'] || s.writeOnly) {
      s.format = 'password'
      attrs.autocomplete = 'off'
    } else if (s.format === 'autocomplete') {
      delete s.format
      const kind = s['x-autocomplete']
      if (kind === 'topics' || kind === 'subscriptions') {
        attrs.list = `dl-${kind}`
        attrs.autocomplete = 'off'
        attrs['data-autocomplete'] = kind
      }
    } else if (s.format && /^(u?int\d+|double|float)$/.test(s.format)) {
      delete s.format
    }
    if (s.type === 'integer' || s.type === 'number') {
      // Text inputs: every value reaches the server's checks unchanged.
      attrs.inputmode = s.type === 'integer' ? 'numeric' : 'decimal'
    }
    if (Object.keys(attrs).length) s.options.inputAttributes = attrs
    if (s.type === 'object' && s.properties) s.options.disable_edit_json = true
    delete s.examples
    delete s.$schema
    return s
  }
  const out = walk(root)
  delete out.definitions
  // The step's heading names the form.
  delete out.title
  delete out.description
  return out
}

/** One variant of the table schema (`source` or `sink`), without its `type` tag. */
function tableVariant (table, type) {
  const variants = (table.oneOf || []).map((v) => ({ v, prepared: prepare({ ...v, definitions: table.definitions }) }))
  const found = variants.find(({ v }) => v.properties && v.properties.type && v.properties.type.const === type)
  if (!found) throw new Error(`the table schema has no '${type}' variant`)
  const s = found.prepared
  delete s.properties.type
  s.required = (s.required || []).filter((k) => k !== 'type')
  return s
}

// ---------------------------------------------------------------------------------------
// Forms.

const EDITOR_OPTIONS = {
  theme: 'html',
  iconlib: null, // no icon fonts (they would come from a CDN)
  ajax: false, // no remote $ref
  disable_edit_json: true,
  disable_collapse: true,
  disable_properties: true,
  disable_array_delete_all_rows: true,
  disable_array_delete_last_row: true,
  disable_array_reorder: true,
  prompt_before_delete: false,
  no_additional_properties: true,
  show_opt_in: true, // optional fields: a box to set them, else the server's default
  use_default_values: false,
  show_errors: 'never', // until a step's button finds errors (checkForm)
  keep_oneof_values: false,
  enforce_const: true,
  compact: false
}

/** A json-editor in `el` for `schema`; resolves once it is ready. */
function makeEditor (el, schema, startval) {
  el.innerHTML = ''
  return new Promise((resolve) => {
    const ed = new window.JSONEditor(el, { ...EDITOR_OPTIONS, schema, startval })
    ed.on('ready', () => {
      tagInputs(el)
      el.addEventListener('click', (e) => {
        if (e.target.classList && e.target.classList.contains('json-editor-opt-in')) setTimeout(() => tagInputs(el), 0)
      })
      ed.on('change', () => tagInputs(el))
      resolve(ed)
    })
  })
}

/**
 * Stable hooks for people's tools and tests: each input gets `data-field` = its JSON
 * pointer within the form (`root.authentication.endpoint` -> `/authentication/endpoint`),
 * each variant switcher `data-field` of its value and `data-role="variant"`, each opt-in
 * box `data-role="opt-in"`, each array's add button `data-role="add"`.
 */
function tagInputs (el) {
  // An optional group that is not set: only its heading and description.
  for (const box of $$('input.json-editor-opt-in', el)) {
    const c = box.closest('[data-schemapath]')
    if (c) c.classList.toggle('je-off', !box.checked)
  }
  // Panels whose fields are all hidden (a variant with nothing to fill in): no empty box.
  for (const panel of $$('.je-indented-panel', el)) {
    const shown = $$('input, select, textarea', panel).some(
      (i) => !i.closest('[style*="display: none"]') && !i.closest('.je-modal') && i.type !== 'hidden'
    )
    panel.classList.toggle('je-empty', !shown)
  }
  for (const c of $$('[data-schemapath]', el)) {
    const path = c.getAttribute('data-schemapath')
    const ptr = pathToPointer(path)
    if (c.getAttribute('data-schematype') === 'array') {
      for (const b of $$('button.json-editor-btntype-add', c)) {
        if (b.closest('.je-modal') || b.closest('[data-schemapath]') !== c) continue
        b.setAttribute('data-role', 'add')
        b.setAttribute('data-field', ptr)
      }
    }
    for (const input of $$('input, select, textarea', c)) {
      if (input.closest('[data-schemapath]') !== c) continue
      if (input.classList.contains('je-switcher') || input.closest('.je-switcher')) {
        input.setAttribute('data-role', 'variant')
        input.setAttribute('data-field', ptr)
      } else if (input.classList.contains('json-editor-opt-in') || input.closest('.json-editor-opt-in')) {
        input.setAttribute('data-role', 'opt-in')
        input.setAttribute('data-field', ptr)
      } else if (!input.hasAttribute('data-field')) {
        input.setAttribute('data-field', ptr)
      }
    }
  }
}

/** `root.a.0.b` -> `/a/0/b`. */
function pathToPointer (path) {
  return path.split('.').slice(1).map((p) => '/' + p.replace(/~/g, '~0').replace(/\//g, '~1')).join('')
}

/** The editor's value after committing the input being typed in (json-editor reads on `change`). */
function valueOf (ed) {
  const a = document.activeElement
  if (a && (a.tagName === 'INPUT' || a.tagName === 'TEXTAREA')) a.dispatchEvent(new Event('change', { bubbles: true }))
  return ed.getValue()
}

/** Shows json-editor's own errors and says whether the form is valid. */
function checkForm (ed, step) {
  // validate(value) checks now; validate() alone answers json-editor's last (deferred) check.
  const errors = ed.validate(valueOf(ed))
  if (!errors.length) return true
  ed.options.show_errors = 'always'
  ed.element.classList.add('checked')
  ed.root.showValidationErrors(errors)
  const first = errors.find((e) => !/oneOf\[/.test(e.path) && e.property !== 'oneOf') || errors[0]
  const where = first.path.replace(/^root\.?/, '').replace(/\.oneOf\[\d+\]/g, '')
  stepError(step, `${where ? where + ': ' : ''}${first.message}`, 'client-error', pathToPointer(first.path))
  return false
}

// ---------------------------------------------------------------------------------------
// Server errors next to their field.

function clearErrors () {
  for (const e of $$('.server-error, .client-error')) {
    if (e.id === 'global-error') {
      e.hidden = true
      e.textContent = ''
    } else e.remove()
  }
  for (const e of $$('.has-server-error')) e.classList.remove('has-server-error')
}

function stepError (step, message, cls = 'server-error', field = '') {
  const box = $(`#step-${step} .step-errors`)
  const div = document.createElement('div')
  div.className = cls
  div.setAttribute('data-field', field || '')
  div.setAttribute('data-testid', cls)
  div.textContent = message
  box.appendChild(div)
  box.scrollIntoView({ block: 'nearest' })
}

const visible = (el) => !!(el && el.offsetParent !== null && !el.disabled)

/**
 * Where the JSON pointer `field` of a request body of `kind` (`profile` or `table`) is in
 * the page: { step, input } or null.
 */
function locate (kind, field) {
  if (!field) return null
  const parts = field.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
  if (parts[0] === 'name') {
    return kind === 'profile' ? { step: 'profile', input: $('#profile-name') } : { step: 'table', input: $('#table-name') }
  }
  if (parts[0] === 'connectionProfileId') return { step: 'profile', input: $('#profile-existing') }
  if (parts[0] === 'sampleSize') return { step: 'test', input: $('#sample-size') }
  let step, form
  if (parts[0] === 'config') {
    step = kind === 'profile' ? 'profile' : 'table'
    form = $(kind === 'profile' ? '#profile-form' : '#table-form')
  } else if (parts[0] === 'schema') {
    step = 'columns'
    form = $('#columns-form')
  } else return null
  // The deepest editor on the pointer's path that the page shows.
  showStep(step)
  for (let n = parts.length; n >= 1; n--) {
    const path = ['root', ...parts.slice(1, n)].join('.')
    const containers = $$(`[data-schemapath="${CSS.escape(path)}"]`, form).filter((c) => c.offsetParent !== null)
    for (const c of containers) {
      const inputs = $$('input, select, textarea', c).filter(
        (i) => i.offsetParent !== null && i.getAttribute('data-role') !== 'opt-in' && i.getAttribute('data-role') !== 'variant' &&
          i.closest('[data-schemapath]') === c
      )
      if (inputs.length) return { step, input: inputs[0] }
      // An object or array: its heading.
      const head = c.querySelector('h3, h4, label, .je-header, span')
      if (head) return { step, input: head }
    }
  }
  return { step, input: null }
}

/** Shows a refused request's `{error, field}` next to its field, or atop the step. */
function showServerError (kind, reply, fallbackStep) {
  clearErrors()
  const message = reply && reply.error ? String(reply.error) : 'the server refused the request'
  const field = reply && typeof reply.field === 'string' ? reply.field : null
  const where = locate(kind, field)
  if (!where || !where.input) {
    const step = where ? where.step : fallbackStep
    showStep(step)
    stepError(step, message, 'server-error', field || '')
    return
  }
  showStep(where.step)
  const div = document.createElement('div')
  div.className = 'server-error'
  div.setAttribute('role', 'alert')
  div.setAttribute('data-field', field)
  div.setAttribute('data-testid', 'server-error')
  div.textContent = message
  const input = where.input
  input.classList.add('has-server-error')
  input.insertAdjacentElement('afterend', div)
  input.scrollIntoView({ block: 'center' })
  if (typeof input.focus === 'function') input.focus({ preventScroll: true })
}

// ---------------------------------------------------------------------------------------
// The API.

// The token of `serve --auth-token-file`, when the server has one: asked for once per tab
// (on the first 401), kept in sessionStorage, sent as `Authorization: Bearer`.
const TOKEN_KEY = 'pubsub-connector-token'

function authHeaders () {
  const token = sessionStorage.getItem(TOKEN_KEY)
  return token ? { authorization: `Bearer ${token}` } : {}
}

/** Shows the token form with the server's reason; the stored token (if any) was refused. */
function askToken (why) {
  sessionStorage.removeItem(TOKEN_KEY)
  $('#token-why').textContent = why || 'this server requires a token'
  $('#token-form').hidden = false
  $('#token-input').focus()
}

/** JSON request; resolves { ok, status, body }. */
async function call (method, path, body) {
  const init = { method, headers: authHeaders() }
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json'
    init.body = JSON.stringify(body)
  }
  let res
  try {
    res = await fetch(API + path, init)
  } catch (e) {
    return { ok: false, status: 0, body: { error: `cannot reach the server: ${e.message}`, field: null } }
  }
  let parsed = null
  const text = await res.text()
  try {
    parsed = text ? JSON.parse(text) : {}
  } catch {
    parsed = { error: text || `${res.status} ${res.statusText}`, field: null }
  }
  if (res.status === 401) askToken(parsed.error)
  return { ok: res.ok, status: res.status, body: parsed }
}

/**
 * A POST answered with server-sent events; calls `onEvent` with each event's JSON.
 * Resolves { ok, body } where body is the error reply when the request was refused.
 */
async function streamEvents (path, body, onEvent) {
  let res
  try {
    res = await fetch(API + path, {
      method: 'POST',
      headers: { ...authHeaders(), 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify(body)
    })
  } catch (e) {
    return { ok: false, body: { error: `cannot reach the server: ${e.message}`, field: null } }
  }
  const type = res.headers.get('content-type') || ''
  if (!res.ok || !type.includes('text/event-stream')) {
    const text = await res.text()
    let parsed
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = { error: text || `${res.status} ${res.statusText}`, field: null }
    }
    if (res.status === 401) askToken(parsed.error)
    return { ok: false, body: parsed }
  }
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let buffer = ''
  const flush = (block) => {
    const data = block
      .split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''))
      .join('\n')
    if (!data) return
    try {
      onEvent(JSON.parse(data))
    } catch (e) {
      onEvent({ error: true, done: false, message: `unreadable event: ${data}`, row: null })
    }
  }
  for (;;) {
    const { value, done } = await reader.read()
    if (done) break
    buffer += decoder.decode(value, { stream: true })
    let i
    while ((i = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const m = buffer.slice(i).match(/^\r?\n\r?\n/)
      flush(buffer.slice(0, i))
      buffer = buffer.slice(i + m[0].length)
    }
  }
  buffer += decoder.decode()
  if (buffer.trim()) flush(buffer)
  return { ok: true }
}

// ---------------------------------------------------------------------------------------
// Steps.

function showStep (step) {
  state.step = step
  for (const s of STEPS) $(`#step-${s}`).hidden = s !== step
  const idx = STEPS.indexOf(step)
  for (const li of $$('#steps li')) {
    const i = STEPS.indexOf(li.dataset.step)
    li.classList.toggle('current', i === idx)
    li.classList.toggle('past', i < idx)
  }
  document.body.dataset.step = step
}

function busy (button, on) {
  button.disabled = on
  button.classList.toggle('busy', on)
}

async function start () {
  const r = await call('GET', '/connectors')
  $('#loading').hidden = true
  if (r.status === 401) return // the token form is shown; its submit starts again
  state.started = true
  if (!r.ok) {
    const g = $('#global-error')
    g.textContent = `cannot load the connectors: ${r.body.error}`
    g.hidden = false
    return
  }
  const list = $('#connector-list')
  for (const c of r.body.data || []) {
    const b = document.createElement('button')
    b.type = 'button'
    b.className = 'card'
    b.id = `connector-${c.id}`
    b.setAttribute('data-testid', `connector-${c.id}`)
    const h = document.createElement('strong')
    h.textContent = c.name || c.id
    const p = document.createElement('span')
    p.textContent = c.description || ''
    const tags = document.createElement('span')
    tags.className = 'tags'
    tags.textContent = [c.source && 'source', c.sink && 'sink', c.testing && 'testable'].filter(Boolean).join(' · ')
    b.append(h, p, tags)
    b.addEventListener('click', () => pickConnector(c))
    list.appendChild(b)
  }
  showStep('connector')
}

async function pickConnector (c) {
  clearErrors()
  state.connector = c
  state.schemas.profile = prepare(c.connectionConfig)
  state.schemas.source = tableVariant(c.tableConfig, 'source')
  state.schemas.sink = tableVariant(c.tableConfig, 'sink')
  state.schemas.columns = prepare(c.schemaConfig)
  state.editors.profile = await makeEditor($('#profile-form'), state.schemas.profile)
  state.editors.table = null
  state.editors.columns = null
  await loadProfiles()
  showStep('profile')
}

async function loadProfiles () {
  const r = await call('GET', '/connection_profiles')
  const box = $('#profile-existing-box')
  const sel = $('#profile-existing')
  sel.innerHTML = ''
  state.profiles = r.ok ? (r.body.data || []).filter((p) => !state.connector || p.connector === state.connector.id) : []
  for (const p of state.profiles) {
    const o = document.createElement('option')
    o.value = p.id
    o.textContent = p.description ? `${p.name} (${p.description})` : p.name
    sel.appendChild(o)
  }
  box.hidden = state.profiles.length === 0
}

/** The profile request body; a test may go before the profile has a name. */
function profileBody (forTest) {
  const name = $('#profile-name').value.trim()
  return {
    name: name || (forTest ? 'connection-test' : ''),
    connector: state.connector.id,
    config: valueOf(state.editors.profile)
  }
}

async function testProfile () {
  clearErrors()
  const out = $('#profile-test-result')
  out.hidden = true
  if (!checkForm(state.editors.profile, 'profile')) return
  const btn = $('#profile-test')
  busy(btn, true)
  out.className = 'result pending'
  out.textContent = 'Testing…'
  out.hidden = false
  const r = await call('POST', '/connection_profiles/test', profileBody(true))
  busy(btn, false)
  if (!r.ok) {
    out.hidden = true
    showServerError('profile', r.body, 'profile')
    return
  }
  out.className = `result ${r.body.error ? 'failed' : 'succeeded'}`
  out.setAttribute('data-outcome', r.body.error ? 'failed' : 'succeeded')
  out.textContent = (r.body.error ? 'Cannot connect: ' : 'Connected: ') + (r.body.message || '')
}

async function saveProfile () {
  clearErrors()
  $('#profile-test-result').hidden = true
  if (!$('#profile-name').value.trim()) {
    showServerError('profile', { error: 'give the profile a name', field: '/name' }, 'profile')
    return
  }
  if (!checkForm(state.editors.profile, 'profile')) return
  const btn = $('#profile-save')
  busy(btn, true)
  const r = await call('POST', '/connection_profiles', profileBody(false))
  busy(btn, false)
  if (!r.ok) {
    showServerError('profile', r.body, 'profile')
    return
  }
  await loadProfiles()
  await useProfile(r.body)
}

async function useProfile (p) {
  clearErrors()
  state.profile = p
  $('#table-profile-name').textContent = p.name
  if (!state.editors.table) await renderTableForm()
  showStep('table')
  await loadAutocomplete()
}

async function loadAutocomplete () {
  const status = $('#autocomplete-status')
  status.textContent = 'Listing topics and subscriptions…'
  const r = await call('GET', `/connection_profiles/${encodeURIComponent(state.profile.id)}/autocomplete`)
  const values = (r.ok && r.body.values) || {}
  for (const kind of ['topics', 'subscriptions']) {
    const dl = $(`#dl-${kind}`)
    dl.innerHTML = ''
    for (const v of values[kind] || []) {
      const o = document.createElement('option')
      o.value = v
      dl.appendChild(o)
    }
  }
  const nt = (values.topics || []).length
  const ns = (values.subscriptions || []).length
  if (!r.ok || r.body.error) {
    status.textContent = `No suggestions: ${(r.body && r.body.error) || 'the listing failed'}`
    status.dataset.state = 'failed'
  } else {
    status.textContent = `Suggestions: ${nt} topic${nt === 1 ? '' : 's'}, ${ns} subscription${ns === 1 ? '' : 's'}.`
    status.dataset.state = 'loaded'
  }
}

async function renderTableForm () {
  state.tableType = $('#table-type-sink').checked ? 'sink' : 'source'
  state.editors.table = await makeEditor($('#table-form'), state.schemas[state.tableType])
}

function tableBody (withSample) {
  const config = { type: state.tableType, ...valueOf(state.editors.table) }
  const body = {
    name: $('#table-name').value.trim(),
    connector: state.connector.id,
    connectionProfileId: state.profile.id,
    config,
    schema: valueOf(state.editors.columns)
  }
  if (withSample) {
    const n = parseInt($('#sample-size').value, 10)
    body.sampleSize = Number.isFinite(n) ? n : $('#sample-size').value
  }
  return body
}

async function tableNext () {
  clearErrors()
  if (!$('#table-name').value.trim()) {
    showServerError('table', { error: 'give the table a name', field: '/name' }, 'table')
    return
  }
  if (!checkForm(state.editors.table, 'table')) return
  if (!state.editors.columns) {
    state.editors.columns = await makeEditor($('#columns-form'), state.schemas.columns)
  }
  showStep('columns')
}

/** Fills the columns form with the columns of the topic's Avro schema (format avro). */
async function deriveColumns () {
  clearErrors()
  const btn = $('#columns-derive')
  busy(btn, true)
  const r = await call('POST', '/connection_tables/schema', {
    connector: state.connector.id,
    connectionProfileId: state.profile.id,
    config: { type: state.tableType, ...valueOf(state.editors.table) }
  })
  busy(btn, false)
  if (!r.ok) {
    stepError('columns', `no columns from the topic's schema: ${r.body.error}`, 'server-error', r.body.field || '')
    return
  }
  state.editors.columns.setValue(r.body)
}

function columnsNext () {
  clearErrors()
  if (!checkForm(state.editors.columns, 'columns')) return
  showStep('test')
}

async function testTable () {
  clearErrors()
  const events = $('#table-test-events')
  const rowsBox = $('#table-test-rows-box')
  const rowsTable = $('#table-test-rows')
  events.innerHTML = ''
  rowsTable.innerHTML = ''
  rowsBox.hidden = true
  events.removeAttribute('data-done')
  const btn = $('#table-test')
  busy(btn, true)
  const rows = []
  const r = await streamEvents('/connection_tables/test', tableBody(true), (ev) => {
    const li = document.createElement('li')
    li.className = ev.error ? 'event failed' : ev.done ? 'event done' : 'event'
    li.setAttribute('data-testid', 'table-test-event')
    li.setAttribute('data-error', String(!!ev.error))
    li.setAttribute('data-done', String(!!ev.done))
    li.textContent = ev.message || ''
    events.appendChild(li)
    if (ev.row && typeof ev.row === 'object') {
      rows.push(ev.row)
      renderRows(rowsTable, rows)
      rowsBox.hidden = false
    }
    if (ev.done) events.setAttribute('data-done', ev.error ? 'failed' : 'succeeded')
  })
  busy(btn, false)
  if (!r.ok) {
    showServerError('table', r.body, 'test')
    return
  }
  if (!events.hasAttribute('data-done')) {
    events.setAttribute('data-done', 'failed')
    stepError('test', 'the test ended before its last step', 'server-error')
  }
}

/** The sample rows as a table, columns in the order of the columns form. */
function renderRows (table, rows) {
  const declared = ((valueOf(state.editors.columns) || {}).fields || []).map((f) => f.name)
  const keys = [...declared]
  for (const row of rows) for (const k of Object.keys(row)) if (!keys.includes(k)) keys.push(k)
  table.innerHTML = ''
  const head = table.createTHead().insertRow()
  for (const k of keys) {
    const th = document.createElement('th')
    th.textContent = k
    head.appendChild(th)
  }
  const body = table.createTBody()
  for (const row of rows) {
    const tr = body.insertRow()
    tr.setAttribute('data-testid', 'sample-row')
    for (const k of keys) {
      const td = tr.insertCell()
      const v = row[k]
      td.setAttribute('data-column', k)
      if (v === null || v === undefined) {
        td.textContent = 'NULL'
        td.className = 'null'
      } else td.textContent = typeof v === 'object' ? JSON.stringify(v) : String(v)
    }
  }
}

async function createTable () {
  clearErrors()
  const btn = $('#table-create')
  busy(btn, true)
  const r = await call('POST', '/connection_tables', tableBody(false))
  busy(btn, false)
  if (!r.ok) {
    showServerError('table', r.body, 'test')
    return
  }
  $('#created-name').textContent = r.body.name || ''
  $('#created-id').textContent = r.body.id || ''
  $('#sql').textContent = r.body.sql || ''
  $('#sql-copied').textContent = ''
  showStep('done')
}

async function copySql () {
  const text = $('#sql').textContent
  const note = $('#sql-copied')
  try {
    if (!navigator.clipboard || !window.isSecureContext) throw new Error('no clipboard API')
    await navigator.clipboard.writeText(text)
    note.textContent = 'Copied.'
  } catch {
    // Fallback: select the text and copy it the old way.
    const ta = document.createElement('textarea')
    ta.value = text
    ta.setAttribute('readonly', '')
    ta.style.position = 'fixed'
    ta.style.opacity = '0'
    document.body.appendChild(ta)
    ta.select()
    let ok = false
    try {
      ok = document.execCommand('copy')
    } catch {
      ok = false
    }
    ta.remove()
    if (ok) note.textContent = 'Copied.'
    else {
      const range = document.createRange()
      range.selectNodeContents($('#sql'))
      const sel = window.getSelection()
      sel.removeAllRanges()
      sel.addRange(range)
      note.textContent = 'Selected: press Ctrl+C to copy.'
    }
  }
}

// ---------------------------------------------------------------------------------------
// Check a pipeline (beside the steps): the server plans its SQL as `run` would and answers
// each table's columns (POST /v1/pipelines/validate).

async function checkPipeline () {
  const out = $('#pipeline-result')
  out.innerHTML = ''
  out.removeAttribute('data-outcome')
  const btn = $('#pipeline-validate')
  busy(btn, true)
  const r = await call('POST', '/pipelines/validate', { query: $('#pipeline-sql').value })
  busy(btn, false)
  if (!r.ok) {
    const div = document.createElement('div')
    div.className = 'pipeline-error'
    div.setAttribute('role', 'alert')
    div.setAttribute('data-testid', 'pipeline-error')
    div.textContent = (r.body && r.body.error) || 'the server refused the pipeline'
    out.appendChild(div)
    out.setAttribute('data-outcome', 'failed')
    div.scrollIntoView({ block: 'nearest' })
    return
  }
  for (const t of r.body.tables || []) out.appendChild(pipelineTable(t))
  out.setAttribute('data-outcome', 'succeeded')
  out.scrollIntoView({ block: 'nearest' })
}

/** One table of the reply: a heading (role, connector, format) and its columns. */
function pipelineTable (t) {
  const box = document.createElement('div')
  box.setAttribute('data-testid', 'pipeline-table')
  box.setAttribute('data-table', t.name)
  box.setAttribute('data-derived', String(!!t.derived))
  const h = document.createElement('h3')
  h.append(`${t.name} `)
  const what = document.createElement('span')
  what.className = 'badge'
  what.textContent = [t.role, t.connector, t.format].filter(Boolean).join(' · ')
  h.appendChild(what)
  if (t.derived) {
    const d = document.createElement('span')
    d.className = 'badge derived'
    d.textContent = 'columns from the query'
    h.append(' ', d)
  }
  box.appendChild(h)
  const table = document.createElement('table')
  table.className = 'rows'
  const head = table.createTHead().insertRow()
  for (const k of ['column', 'type', 'null', 'from']) {
    const th = document.createElement('th')
    th.textContent = k
    head.appendChild(th)
  }
  const body = table.createTBody()
  for (const f of t.fields || []) {
    const tr = body.insertRow()
    // A derived table's metadata columns are the declared ones; the rest came from the query.
    const derived = !!t.derived && !f.metadataKey
    tr.setAttribute('data-testid', 'pipeline-column')
    tr.setAttribute('data-column', f.name)
    tr.setAttribute('data-type', f.type)
    tr.setAttribute('data-derived', String(derived))
    const from = f.metadataKey ? `METADATA FROM '${f.metadataKey}'` : derived ? 'from the query' : 'declared'
    for (const v of [f.name, f.type, f.nullable ? 'NULL' : 'NOT NULL', from]) {
      tr.insertCell().textContent = v
    }
  }
  box.appendChild(table)
  return box
}

function wire () {
  for (const b of $$('[data-goto]')) b.addEventListener('click', () => {
    clearErrors()
    showStep(b.dataset.goto)
  })
  $('#profile-test').addEventListener('click', testProfile)
  $('#profile-save').addEventListener('click', saveProfile)
  $('#profile-use').addEventListener('click', () => {
    const p = state.profiles.find((x) => x.id === $('#profile-existing').value)
    if (p) useProfile(p)
  })
  for (const r of $$('input[name="table-type"]')) {
    r.addEventListener('change', async () => {
      clearErrors()
      await renderTableForm()
    })
  }
  $('#token-form').addEventListener('submit', async (ev) => {
    ev.preventDefault()
    sessionStorage.setItem(TOKEN_KEY, $('#token-input').value.trim())
    $('#token-input').value = ''
    $('#token-form').hidden = true
    // Before the connectors loaded nothing else ran; later, the user repeats the action.
    if (!state.started) await start()
  })
  $('#table-next').addEventListener('click', tableNext)
  $('#columns-next').addEventListener('click', columnsNext)
  $('#columns-derive').addEventListener('click', deriveColumns)
  $('#table-test').addEventListener('click', testTable)
  $('#table-create').addEventListener('click', createTable)
  $('#sql-copy').addEventListener('click', copySql)
  $('#pipeline-validate').addEventListener('click', checkPipeline)
  $('#another-table').addEventListener('click', async () => {
    clearErrors()
    $('#table-name').value = ''
    $('#table-test-events').innerHTML = ''
    $('#table-test-rows-box').hidden = true
    await renderTableForm()
    showStep('table')
    await loadAutocomplete()
  })
}

wire()
start().catch((e) => {
  const g = $('#global-error')
  g.textContent = `the wizard failed to start: ${e.message}`
  g.hidden = false
})
// For debugging in the browser console.
window.wizard = state
