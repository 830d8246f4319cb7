// The card on Airflow's home page: each executor instance's health, reason and
// how long it has held, read from Airflow's own `/api/v2/monitor/health` (the
// `executor` entry the plugin's middleware adds) every REFRESH_MS while the
// page is open. How long a health has held is remembered across reads (see
// `track` and `held` in rules.js: the entry itself cannot say).
//
// Airflow 3.3's UI loads the bundle with a dynamic `import()` and takes the
// component from `globalThis[<react app's name>]`, else `globalThis.AirflowPlugin`
// (the UMD global vite.config.js names); it shares its own React, as the
// globals `React` and `ReactJSXRuntime` that the bundle's imports are mapped to.
// So the card renders with Airflow's React, inside Airflow's tree.

import { useEffect, useRef, useState } from "react";

import { colour, healthUrl, held, READ_TIMEOUT_MS, REFRESH_MS, timestamp, track, view } from "./rules.js";

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

/** One read of the endpoint: its JSON body, or an error saying why not. */
async function readHealth(signal) {
  const response = await fetch(healthUrl(document.baseURI), {
    headers: { Accept: "application/json" },
    cache: "no-store",
    credentials: "same-origin",
    signal,
  });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return response.json();
}

export default function ExecutorHealthCard() {
  // The last body read, when, and the last read's error (null when it worked).
  const [read, setRead] = useState({ body: null, at: null, error: null });
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
        const body = await readHealth(controller.signal);
        const at = Date.now();
        memory.current = track(memory.current, view(body).instances, at);
        if (!stopped) setRead({ body, at, error: null });
      } catch (e) {
        const why = e?.name === "AbortError" ? `no answer within ${READ_TIMEOUT_MS / 1000} s` : String(e?.message ?? e);
        if (!stopped) setRead((last) => ({ ...last, error: why }));
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
    </section>
  );
}
