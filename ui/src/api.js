// The REST verbs the explorer calls, with the key as a Bearer header. The page calls nothing
// else: every view shows what the key's reader may read because the service decides it.
//
// The key lives in sessionStorage (this tab only, gone when the tab closes), is sent only in
// the Authorization header, and is never written to a URL, the console or the page.

const STORAGE = "sibyl-pg.api-key";

export const key = {
  get() {
    return sessionStorage.getItem(STORAGE);
  },
  set(value) {
    sessionStorage.setItem(STORAGE, value);
  },
  clear() {
    sessionStorage.removeItem(STORAGE);
  },
};

/** An answer other than 2xx: `status` and the service's `detail` (a string). */
export class ApiError extends Error {
  constructor(status, detail, body) {
    super(detail);
    this.status = status;
    this.detail = detail;
    this.body = body;
  }
}

function detailOf(status, body) {
  if (body && typeof body.detail === "string") return body.detail;
  if (body && Array.isArray(body.detail)) {
    // 422: location and message of each fault
    return body.detail.map((e) => `${(e.loc || []).join(".")}: ${e.msg}`).join("; ");
  }
  if (status === 0) return "The service cannot be reached";
  return `HTTP ${status}`;
}

let onUnauthorized = () => {};
/** Called once when the service answers 401 (a revoked or wrong key): back to sign-in. */
export function whenUnauthorized(callback) {
  onUnauthorized = callback;
}

/** One request: JSON in, JSON out; throws ApiError for any other status than 2xx. */
export async function call(method, path, { body, ifMatch, query } = {}) {
  const headers = { Accept: "application/json" };
  const secret = key.get();
  if (secret) headers.Authorization = `Bearer ${secret}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (ifMatch !== undefined) headers["If-Match"] = `"${ifMatch}"`;
  const url = query ? `${path}?${new URLSearchParams(query)}` : path;
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
  } catch {
    throw new ApiError(0, detailOf(0, null), null);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    if (response.status === 401) onUnauthorized();
    throw new ApiError(response.status, detailOf(response.status, data), data);
  }
  const etag = response.headers.get("ETag");
  return { data, status: response.status, revision: etag ? Number(etag.replaceAll('"', "")) : null };
}

const id = (value) => encodeURIComponent(value);

export const api = {
  search: (body) => call("POST", "/api/search", { body }),
  expand: (body) => call("POST", "/api/search/expand", { body }),
  slice: (body) => call("POST", "/api/search/slice", { body }),
  entity: (entityId) => call("GET", `/api/entities/${id(entityId)}`),
  update: (entityId, patch, revision) =>
    call("PATCH", `/api/entities/${id(entityId)}`, { body: patch, ifMatch: revision }),
  remove: (entityId, revision) =>
    call("DELETE", `/api/entities/${id(entityId)}`, { ifMatch: revision }),
  link: (src, relationship, dst) => call("POST", "/api/edges", { body: { src, relationship, dst } }),
  explain: (verb, body) =>
    call("POST", `/api/admin/explain/${id(verb)}`, { body, query: { format: "json" } }),
};

// No id matches [A-Za-z0-9_.:-], so "~" names no memory, and no revision is 0: these probes
// can change nothing, whatever the key.
const PROBE_ID = "~explorer-probe";

/**
 * What the key may do, asked of the service with verbs that change nothing: a read of an id
 * that cannot exist (401: the key is refused), an empty edit of it (403: no `write` scope; 404:
 * the key writes), and the explain of a read of it (404: not an admin key).
 */
export async function capabilities() {
  try {
    await api.entity(PROBE_ID);
  } catch (error) {
    if (error.status !== 404) throw error;
  }
  const [write, admin] = await Promise.all([
    api.update(PROBE_ID, {}, 0).then(
      () => true,
      (error) => error.status === 404 || error.status === 412,
    ),
    api.explain("slice", { entity_id: PROBE_ID, window: 1 }).then(
      () => true,
      (error) => error.status === 400 || error.status === 422, // the route exists for the key
    ),
  ]);
  return { write, admin };
}
