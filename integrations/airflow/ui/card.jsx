// The card on Airflow's home page: each executor instance's health, reason and
// how long it has held, read from Airflow's own `/api/v2/monitor/health` (the
// `executor` entry the plugin's middleware adds) every REFRESH_MS while the
// page is open. How long a health has held is remembered across reads (see
// `track` and `held` in rules.js: the entry itself cannot say). Beside it, at
// each refresh, the canary's latest facts per queue from the plugin's own
// route (`overseer-card/canary`): facts only, Overseer's verdict on them is in
// the entry's reasons.
//
// Airflow 3.3's UI loads the bundle with a dynamic `import()` and takes the
// component from `globalThis[<react app's name>]`, else `globalThis.AirflowPlugin`
// (the UMD global vite.config.js names); it shares its own React, as the
// globals `React` and `ReactJSXRuntime` that the bundle's imports are mapped to.
// So the card renders with Airflow's React, inside Airflow's tree.

import { Fragment, useEffect, useRef, useState } from "react";

import {
  canaryUrl,
  canaryView,
  colour,
  healthUrl,
  held,
  READ_TIMEOUT_MS,
  REFRESH_MS,
  timestamp,
  track,
  view,
} from "./rules.js";

const styles = {
  card: {
    border: "1px solid var(--chakra-colors-border, rgba(127, 127, 127, 0.35))",
    borderRadius: "8px",
    padding: "12px 16px",
    fontSize: "14px",
    lineHeight: 1.4,
  },
  header: { display: "flex", alignItems: "center", gap: "8px", flexWrap: "wrap" },
  title: { fontSize: "18px", fontWeight: 600, margin: 0 },
  quiet: { opacity: 0.7, fontSize: "12px" },
  list: { listStyle: "none", margin: "8px 0 0", padding: 0 },
  row: {
    display: "grid",
    gridTemplateColumns: "14px minmax(0, 1fr) auto",
    columnGap: "8px",
    padding: "6px 0",
    borderTop: "1px solid var(--chakra-colors-border-muted, rgba(127, 127, 127, 0.2))",
  },
  name: { fontWeight: 600, overflowWrap: "anywhere" },
  where: { opacity: 0.8, overflowWrap: "anywhere" },
  reason: { gridColumn: "2 / 4", overflowWrap: "anywhere" },
  right: { textAlign: "right", whiteSpace: "nowrap" },
  subtitle: { fontSize: "14px", fontWeight: 600, margin: "10px 0 0" },
  canaryRow: {
    display: "grid",
    gridTemplateColumns: "minmax(0, 1fr) auto",
    columnGap: "8px",
    padding: "4px 0",
    borderTop: "1px solid var(--chakra-colors-border-muted, rgba(127, 127, 127, 0.2))",
  },
};

function Dot({ health }) {
  return (
    <span
      aria-hidden="true"
      style={{
        display: "inline-block",
        width: "10px",
        height: "10px",
        borderRadius: "50%",
        marginTop: "5px",
        background: colour(health),
      }}
    />
  );
}

function Badge({ health }) {
  return (
    <span
      data-testid="overseer-executor-status"
      style={{
        background: colour(health),
        color: "#fff",
        borderRadius: "4px",
        padding: "0 6px",
        fontSize: "12px",
        fontWeight: 600,
      }}
    >
      {health}
    </span>
  );
}

/** One instance's row: its dot, executor, broker and host, health and age, reason. */
function Instance({ instance: i, age }) {
  return (
    <li
      data-testid="overseer-executor-instance"
      data-health={i.health}
      data-executor={i.executor}
      data-hostname={i.hostname}
      data-instance={i.instance}
      style={styles.row}
    >
      <Dot health={i.health} />
      <div>
        <span style={styles.name}>{i.executor}</span>{" "}
        <span style={styles.where}>
          {i.instance ? `${i.instance} · ` : ""}
          {i.hostname}
        </span>
      </div>
      <div style={styles.right}>
        <span style={{ color: colour(i.health), fontWeight: 600 }}>{i.health}</span>
        {age ? (
          <span style={styles.quiet} title={age.why} data-testid="overseer-executor-held">
            {" "}
            · {age.text}
          </span>
        ) : null}
      </div>
      {i.reason ? (
        <div
          data-testid="overseer-executor-instance-reason"
          style={styles.reason}
          title={i.said !== i.reason ? i.said : undefined}
        >
          {i.reason}
        </div>
      ) : null}
    </li>
  );
}

/** One queue's canary: its name, its latest state, and the facts known. */
function CanaryQueue({ queue: q }) {
  return (
    <li
      data-testid="overseer-canary-queue"
      data-queue={q.queue}
      data-state={q.state}
      data-silent={q.silent ? "true" : undefined}
      style={styles.canaryRow}
    >
      <div>
        <span style={styles.name}>{q.queue}</span>{" "}
        <span style={styles.where}>
          {q.facts.map((f) => (
            <Fragment key={f.id}>
              {" · "}
              <span
                data-testid={`overseer-canary-${f.id}`}
                title={f.title}
                style={f.fault ? { color: colour("unhealthy"), fontWeight: 600 } : undefined}
              >
                {f.text}
              </span>
            </Fragment>
          ))}
        </span>
      </div>
      <div style={styles.right}>{q.state}</div>
    </li>
  );
}

/** The canary's queues, or nothing when it has none (not installed). */
function Canary({ read }) {
  const queues = read.body ? canaryView(read.body) : [];
  if (queues.length === 0 && !read.error) return null;
  return (
    <div data-testid="overseer-canary">
      <h3 style={styles.subtitle}>
        Canary <span style={styles.quiet}>{read.body?.dag_id ?? "overseer_canary"}, per queue</span>
      </h3>
      {read.error ? (
        <div data-testid="overseer-canary-error" style={styles.quiet}>
          Could not read the canary: {read.error}
          {queues.length ? " (showing the last answer)" : ""}
        </div>
      ) : null}
      {queues.length ? (
        <ul style={styles.list}>
          {queues.map((q) => (
            <CanaryQueue key={q.key} queue={q} />
          ))}
        </ul>
      ) : null}
    </div>
  );
}

/** One read of `url` on the page's origin: its JSON body, or an error saying
 * why not (with the route's own `detail`, when it gives one). */
async function readJson(url, signal) {
  const response = await fetch(url, {
    headers: { Accept: "application/json" },
    cache: "no-store",
    credentials: "same-origin",
    signal,
  });
  if (!response.ok) {
    const detail = await response.json().then((b) => b?.detail, () => null);
    throw new Error(typeof detail === "string" ? `HTTP ${response.status}: ${detail}` : `HTTP ${response.status}`);
  }
  return response.json();
}

/** Why a read failed, in words. */
function why(e) {
  return e?.name === "AbortError" ? `no answer within ${READ_TIMEOUT_MS / 1000} s` : String(e?.message ?? e);
}

export default function ExecutorHealthCard() {
  // The last body read, when, and the last read's error (null when it worked).
  const [read, setRead] = useState({ body: null, at: null, error: null });
  // The same of the canary's route.
  const [canary, setCanary] = useState({ body: null, error: null });
  const [now, setNow] = useState(() => Date.now());
  // At most one read in flight: a slow endpoint is not asked again meanwhile.
  const inFlight = useRef(false);
  // Each instance's health and when a read first showed it (rules.js `track`).
  const memory = useRef(new Map());

  useEffect(() => {
    let stopped = false;
    let controller = null;
    async function refresh() {
      if (inFlight.current) return;
      inFlight.current = true;
      controller = new AbortController();
      const timeout = setTimeout(() => controller.abort(), READ_TIMEOUT_MS);
      try {
        // Both at once; each kept, or its error said, on its own.
        const [health, facts] = await Promise.allSettled([
          readJson(healthUrl(document.baseURI), controller.signal),
          readJson(canaryUrl(document.baseURI), controller.signal),
        ]);
        if (health.status === "fulfilled") {
          const body = health.value;
          const at = Date.now();
          memory.current = track(memory.current, view(body).instances, at);
          if (!stopped) setRead({ body, at, error: null });
        } else if (!stopped) {
          setRead((last) => ({ ...last, error: why(health.reason) }));
        }
        if (stopped) return;
        if (facts.status === "fulfilled") setCanary({ body: facts.value, error: null });
        else setCanary((last) => ({ ...last, error: why(facts.reason) }));
      } finally {
        clearTimeout(timeout);
        inFlight.current = false;
        if (!stopped) setNow(Date.now());
      }
    }
    refresh();
    const timer = setInterval(refresh, REFRESH_MS);
    return () => {
      stopped = true;
      clearInterval(timer);
      controller?.abort();
    };
  }, []);

  const shown = read.body ? view(read.body) : null;
  const status = shown && !read.error ? shown.status : "unknown";
  return (
    <section data-testid="overseer-executor-health" data-status={status} style={styles.card}>
      <div style={styles.header}>
        <h2 style={styles.title}>Executors</h2>
        <Badge health={status} />
        <span style={styles.quiet} data-testid="overseer-executor-read">
          {read.at ? `from Overseer's verdicts · read ${timestamp(read.at)}` : "reading…"}
        </span>
      </div>
      {read.error ? (
        <div data-testid="overseer-executor-error" style={{ color: colour("unhealthy"), marginTop: "6px" }}>
          Could not read Airflow's health endpoint: {read.error}
          {shown ? " (showing the last answer)" : ""}
        </div>
      ) : null}
      {shown?.reason ? (
        <div data-testid="overseer-executor-reason" style={{ marginTop: "6px" }}>
          {shown.reason}
        </div>
      ) : null}
      {shown && shown.instances.length === 0 && !shown.reason ? (
        <div style={{ marginTop: "6px" }}>No live executor instance.</div>
      ) : null}
      {shown && shown.instances.length > 0 ? (
        <ul style={styles.list}>
          {shown.instances.map((i) => (
            <Instance key={i.key} instance={i} age={held(i, memory.current.get(i.key), now)} />
          ))}
        </ul>
      ) : null}
      <Canary read={canary} />
    </section>
  );
}
