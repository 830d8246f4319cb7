// The card's rules, as pure functions (the time passed in): what it reads, how
// it colours a health and says how long it has held. No React, no browser:
// `npm test` runs them under Node's own test runner (rules.test.js).

/** Airflow's health route, below the UI's base (`[api] base_url`). */
export const HEALTH_PATH = "api/v2/monitor/health";

/** How often the card reads the endpoint while the page is open. */
export const REFRESH_MS = 5000;

/** How long one read may take before the card says it could not read. */
export const READ_TIMEOUT_MS = 10000;

/**
 * The colour of each health, as Airflow's own health section colours its
 * components: green healthy, red unhealthy, grey for anything not judged.
 */
export const COLOURS = {
  healthy: "#16a34a",
  unhealthy: "#dc2626",
  unknown: "#9ca3af",
};

/** The colour of `health` (`healthy`, `unhealthy`; anything else is grey). */
export function colour(health) {
  return COLOURS[health] ?? COLOURS.unknown;
}

/**
 * The health endpoint's URL for a page whose base is `baseURI` (the UI's
 * `<base href>`, which carries any `[api] base_url` prefix): same origin, so
 * neither a frame nor CORS.
 */
export function healthUrl(baseURI) {
  return new URL(HEALTH_PATH, baseURI).href;
}

/**
 * `text` with the password of any URL in it replaced by `***`. Overseer never
 * writes one into the `job` table, and the plugin removes them from its own
 * reasons; the card removes them again so that no row written by another hand
 * can show one.
 */
export function redact(text) {
  if (typeof text !== "string") return text;
  return text.replace(/[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s'"<>]+/g, (token) => {
    const start = token.indexOf("://") + 3;
    // The authority ends at the path, the query or the fragment.
    const authority = token.slice(start).split(/[/?#]/, 1)[0];
    const at = authority.lastIndexOf("@");
    const colon = authority.slice(0, Math.max(at, 0)).indexOf(":");
    if (at < 0 || colon < 0) return token;
    return `${token.slice(0, start)}${authority.slice(0, colon)}:***${token.slice(start + at)}`;
  });
}

/**
 * A moment as Airflow's UI writes one: `2026-12-02 06:03:53` (its
 * `YYYY-MM-DD HH:mm:ss`), in the browser's local time zone, which is the UI's
 * own default. `date` is a `Date` or milliseconds.
 */
export function timestamp(date) {
  const at = new Date(date);
  const pad = (n) => String(n).padStart(2, "0");
  return (
    `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ` +
    `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`
  );
}

/** The characters that may end a URL or a program's path inside a reason. */
const AFTER = String.raw`(?=$|[\s:;,)'"])`;
/** ... and those that may come before one. */
const BEFORE = String.raw`(?<=^|[\s(;'"])`;

function literal(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * An instance's `reason` as the card shows it, below the line that names the
 * instance: without the instance's own text again. Overseer's Celery reasons
 * name their broker (`broker redis://b:6379/0 refused the connection`,
 * `broker redis://b:6379/0: the connection attempt failed: ...`), the command
 * and HTTP checks their program or URL (`GET http://probe/health answered
 * 503 ...`). `broker <it>: ` is dropped, `broker <it>` otherwise becomes `the
 * broker`, and the bare instance is dropped. Another broker (one of a failover list), or a reason
 * that would be left empty, is kept as it is.
 */
export function withoutInstance(reason, instance) {
  if (typeof reason !== "string" || typeof instance !== "string" || !instance) return reason;
  const it = literal(instance);
  const shown = reason
    .replace(new RegExp(String.raw`${BEFORE}broker ${it}: `, "g"), "")
    .replace(new RegExp(String.raw`${BEFORE}broker ${it}${AFTER}`, "g"), "the broker")
    .replace(new RegExp(String.raw` ?${BEFORE}${it}${AFTER}`, "g"), "")
    .trim();
  return shown ? shown : reason;
}

/** A length of time in words: `12 s`, `4 min`, `3 h 5 min`, `2 d 4 h`. */
export function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 24) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}

/**
 * What the card remembers of each instance between reads (a `Map` by key):
 * its health and when a read (at `at`, ms) first showed it so; `changed` when
 * the card saw it turn, rather than finding it so when the page opened.
 * Airflow's entry cannot say when a health began: the `job` table holds when
 * the verdict was last made (`checked_at`, which Overseer moves with every
 * heartbeat), and `since` is Overseer's own entry's, from its history table.
 */
export function track(memory, instances, at) {
  const next = new Map();
  for (const i of instances) {
    const before = memory.get(i.key);
    if (before && before.health === i.health) next.set(i.key, before);
    else next.set(i.key, { health: i.health, since: at, changed: before !== undefined });
  }
  return next;
}

/** How long the card must have watched a health before it says `for over`. */
export const WATCHED_MS = 60_000;

/**
 * How long an instance's health has held, at `now` (ms), as far as is known,
 * with what that rests on: `since` in the entry (`for 4 min`); else the turn
 * the card saw (`for 35 s`, to within one refresh); else, once the card has
 * watched it a minute, `for over 2 min`; else when Overseer last checked it
 * (`checked 3 s ago`). `null` when nothing is known.
 */
export function held(instance, seen, now) {
  const since = Date.parse(instance?.since ?? "");
  if (Number.isFinite(since)) {
    return { text: `for ${duration(now - since)}`, why: "since Overseer's verdict history says it turned" };
  }
  if (seen?.changed) {
    return { text: `for ${duration(now - seen.since)}`, why: "since this page saw it turn" };
  }
  if (seen && now - seen.since >= WATCHED_MS) {
    return { text: `for over ${duration(now - seen.since)}`, why: "as long as this page has shown it" };
  }
  const checked = Date.parse(instance?.checked_at ?? "");
  if (Number.isFinite(checked)) {
    return { text: `checked ${duration(now - checked)} ago`, why: "when Overseer last checked it" };
  }
  return null;
}

/**
 * What the card shows of Airflow's health body: the `executor` entry's
 * status, its own reason (of Overseer itself) and one line per instance, its
 * reason without the instance the line names (how long each has held is
 * `held`'s, from what `track` remembers).
 * A body without the entry means the plugin's middleware did not run.
 */
export function view(body) {
  const entry = body?.executor;
  if (!entry || typeof entry !== "object") {
    return {
      status: "unknown",
      reason:
        "Airflow's health endpoint has no executor entry: is Overseer's plugin installed on every api-server?",
      instances: [],
    };
  }
  const instances = (Array.isArray(entry.instances) ? entry.instances : []).map((i) => {
    const instance = redact(i.instance ?? "");
    const said = redact(i.reason ?? "");
    return {
      key: `${i.hostname ?? ""}\u0000${i.executor ?? ""}\u0000${instance}`,
      executor: i.executor ?? "",
      instance,
      hostname: i.hostname ?? "",
      health: ["healthy", "unhealthy"].includes(i.health) ? i.health : "unknown",
      // Shown below the instance's name: without it again (`withoutInstance`).
      reason: withoutInstance(said, instance),
      // The reason as Overseer wrote it: on hover.
      said,
      since: i.since ?? null,
      checked_at: i.checked_at ?? null,
    };
  });
  return {
    status: ["healthy", "unhealthy"].includes(entry.status) ? entry.status : "unknown",
    reason: redact(entry.reason ?? ""),
    instances,
  };
}

/** The canary's facts, below the UI's base: the plugin's own route. */
export const CANARY_PATH = "overseer-card/canary";

/** The canary route's URL for a page whose base is `baseURI` (as `healthUrl`). */
export function canaryUrl(baseURI) {
  return new URL(CANARY_PATH, baseURI).href;
}

/** A pickup latency in words: `840 ms`, `1.3 s`, `12 s`, `2 min`. */
export function latency(seconds) {
  if (!Number.isFinite(seconds)) return null;
  const s = Math.max(0, seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 10) return `${s.toFixed(1)} s`;
  return duration(s * 1000);
}

/**
 * What the card shows of the canary route's body (`canary_facts.py`): one
 * line per queue, its latest canary's state and the facts that are known, as
 * text (`id` names each for the page): a canary waiting in queued and for how
 * long, the pickup latency of the latest canary a worker started, when the
 * latest success ended (its age at the read, by the server's clock, as the
 * wait is). No verdict: Overseer's reaches the card through the entry's reasons.
 * One fact is a fault, marked `fault` for the card to colour: a canary that
 * stopped running (`silent_seconds`, its latest run three periods old), said
 * beside the last success, which would otherwise read as all is well.
 * No queue (the canary not installed, or never run): an empty list.
 */
export function canaryView(body) {
  const queues = Array.isArray(body?.queues) ? body.queues : [];
  const readAt = Date.parse(body?.read_at ?? "");
  const runs = Number.isInteger(body?.runs_read) ? body.runs_read : null;
  const silent = Number.isFinite(body?.silent_seconds) && Number.isFinite(body?.every_seconds)
    ? `not run for ${duration(body.silent_seconds * 1000)} (every ${duration(body.every_seconds * 1000)})`
    : null;
  return queues.map((q) => {
    const facts = [];
    if (Number.isFinite(q.waiting_seconds)) {
      facts.push({ id: "waiting", text: `waiting in queued for ${duration(q.waiting_seconds * 1000)}` });
    }
    const pickup = latency(q.pickup_seconds);
    if (pickup) {
      const at = Date.parse(q.picked_up_at ?? "");
      facts.push({
        id: "pickup",
        text: `picked up in ${pickup}`,
        title: Number.isFinite(at) ? `from queued to started, started ${timestamp(at)}` : "from queued to started",
      });
    }
    const success = Date.parse(q.last_success ?? "");
    if (Number.isFinite(success)) {
      const ago = Number.isFinite(readAt) ? `, ${duration(readAt - success)} ago` : "";
      facts.push({ id: "success", text: `last success ${timestamp(success)}${ago}` });
    } else {
      facts.push({ id: "success", text: runs ? `no success in its latest ${runs} runs` : "no success read" });
    }
    if (silent) facts.push({ id: "silent", text: silent, fault: true });
    return { key: q.queue ?? "", queue: q.queue ?? "", state: q.state ?? "no state yet", facts, silent: !!silent };
  });
}
