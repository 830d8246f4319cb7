// `npm test`: the card's rules under Node's own test runner.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  canaryUrl,
  canaryView,
  colour,
  COLOURS,
  duration,
  healthUrl,
  held,
  latency,
  redact,
  timestamp,
  track,
  view,
  withoutInstance,
} from "./rules.js";

test("the health route under the UI's base, with or without a base_url prefix", () => {
  assert.equal(healthUrl("http://airflow:8080/"), "http://airflow:8080/api/v2/monitor/health");
  assert.equal(
    healthUrl("https://example.com/airflow/"),
    "https://example.com/airflow/api/v2/monitor/health",
  );
});

test("green healthy, red unhealthy, grey anything else", () => {
  assert.equal(colour("healthy"), COLOURS.healthy);
  assert.equal(colour("unhealthy"), COLOURS.unhealthy);
  for (const other of ["unknown", undefined, null, "degraded"]) {
    assert.equal(colour(other), COLOURS.unknown);
  }
});

test("durations in words", () => {
  const table = [
    [0, "0 s"],
    [-5000, "0 s"],
    [59_999, "59 s"],
    [60_000, "1 min"],
    [3_599_000, "59 min"],
    [3_600_000, "1 h"],
    [3_900_000, "1 h 5 min"],
    [86_400_000, "1 d"],
    [90_000_000, "1 d 1 h"],
  ];
  for (const [ms, text] of table) assert.equal(duration(ms), text, `${ms} ms`);
});

test("how long it held: since, else a turn seen, else watched a minute, else checked_at", () => {
  const now = Date.parse("2026-11-29T20:00:00+00:00");
  const instance = { since: null, checked_at: "2026-11-29T19:59:57.5+00:00" };
  assert.equal(
    held({ since: "2026-11-29T19:56:00+00:00", checked_at: "2026-11-29T19:59:58+00:00" }, undefined, now).text,
    "for 4 min",
  );
  assert.equal(held(instance, { health: "unhealthy", since: now - 35_000, changed: true }, now).text, "for 35 s");
  assert.equal(held(instance, { health: "healthy", since: now - 125_000, changed: false }, now).text, "for over 2 min");
  assert.equal(held(instance, { health: "healthy", since: now - 30_000, changed: false }, now).text, "checked 2 s ago");
  assert.equal(held(instance, undefined, now).text, "checked 2 s ago");
  assert.equal(held({ since: null, checked_at: null }, undefined, now), null);
  assert.equal(held({ checked_at: "not a time" }, undefined, now), null);
});

test("the card remembers when each health began, and whether it saw the turn", () => {
  const a = { key: "a", health: "healthy" };
  const b = { key: "b", health: "unknown" };
  let memory = track(new Map(), [a, b], 1000);
  assert.deepEqual(memory.get("a"), { health: "healthy", since: 1000, changed: false });
  memory = track(memory, [a, b], 6000);
  assert.deepEqual(memory.get("a"), { health: "healthy", since: 1000, changed: false });
  memory = track(memory, [{ key: "a", health: "unhealthy" }], 11000);
  assert.deepEqual(memory.get("a"), { health: "unhealthy", since: 11000, changed: true });
  assert.equal(memory.has("b"), false, "gone instances are forgotten");
  memory = track(memory, [b], 16000);
  assert.deepEqual(memory.get("b"), { health: "unknown", since: 16000, changed: false });
});

test("passwords in URLs never shown", () => {
  assert.equal(redact("redis://:secret@broker:6379/0"), "redis://:***@broker:6379/0");
  assert.equal(redact("amqp://user:p%40ss@mq/vhost is down"), "amqp://user:***@mq/vhost is down");
  assert.equal(redact("redis://broker:6379/0"), "redis://broker:6379/0");
  assert.equal(redact("sqs://"), "sqs://");
  assert.equal(redact("user@host without scheme"), "user@host without scheme");
  assert.equal(redact("https://host:443/p@x?q=a:b@c"), "https://host:443/p@x?q=a:b@c");
  assert.equal(redact("redis://u:p@ss@host/0"), "redis://u:***@host/0");
  assert.equal(redact(null), null);
});

test("the view of Airflow's body", () => {
  const now = Date.parse("2026-11-29T20:00:00+00:00");
  const body = {
    metadatabase: { status: "healthy" },
    executor: {
      status: "unhealthy",
      detailed_status: "degraded",
      reason: "Overseer on sched-b stopped heartbeating",
      instances: [
        {
          executor: "CeleryExecutor",
          instance: "redis://:pw@broker:6379/0",
          hostname: "sched-a",
          health: "unhealthy",
          reason: "broker unreachable: redis://:pw@broker:6379/0 refused",
          checked_at: "2026-11-29T19:59:50+00:00",
          since: null,
        },
        { executor: "x", instance: "sqs://", hostname: "sched-a", health: "unknown", reason: "not checked yet" },
      ],
    },
  };
  const shown = view(body);
  assert.equal(shown.status, "unhealthy");
  assert.equal(shown.reason, "Overseer on sched-b stopped heartbeating");
  assert.equal(shown.instances.length, 2);
  assert.deepEqual(
    { ...shown.instances[0], key: undefined },
    {
      key: undefined,
      executor: "CeleryExecutor",
      instance: "redis://:***@broker:6379/0",
      hostname: "sched-a",
      health: "unhealthy",
      reason: "broker unreachable: refused",
      said: "broker unreachable: redis://:***@broker:6379/0 refused",
      since: null,
      checked_at: "2026-11-29T19:59:50+00:00",
    },
  );
  assert.equal(shown.instances[1].health, "unknown");
  assert.equal(held(shown.instances[0], undefined, now).text, "checked 10 s ago");
  assert.equal(JSON.stringify(shown).includes("pw@"), false);
});

test("no executor entry: unknown, saying why", () => {
  const shown = view({ metadatabase: { status: "healthy" } });
  assert.equal(shown.status, "unknown");
  assert.match(shown.reason, /no executor entry/);
  assert.deepEqual(shown.instances, []);
});

test("a moment as Airflow's UI writes it: YYYY-MM-DD HH:mm:ss, local time", () => {
  // Built from local parts, so the test holds in any time zone.
  assert.equal(timestamp(new Date(2026, 11, 2, 6, 3, 53)), "2026-12-02 06:03:53");
  assert.equal(timestamp(new Date(2027, 0, 5, 17, 8, 9, 999)), "2027-01-05 17:08:09");
  assert.equal(timestamp(new Date(2026, 11, 2, 0, 0, 0).getTime()), "2026-12-02 00:00:00");
});

test("the reason without its instance, which the line above names", () => {
  const broker = "redis://127.0.0.1:6379/0";
  const table = [
    // Overseer's Celery reasons (crates/celery: check.rs, redis.rs, amqp.rs, verdict.rs).
    [`broker ${broker} refused the connection`, "the broker refused the connection"],
    [`broker ${broker} is not connected`, "the broker is not connected"],
    [`broker ${broker}: the connection attempt failed: timed out`, "the connection attempt failed: timed out"],
    [
      `broker ${broker} closed the connection (reset by peer; is this port TLS? then the URL is rediss://)`,
      "the broker closed the connection (reset by peer; is this port TLS? then the URL is rediss://)",
    ],
    [
      `workers not watched: broker ${broker}: the broker did not set the ping up in time`,
      "workers not watched: the broker did not set the ping up in time",
    ],
    [
      `no broker answered; broker ${broker} refused the connection`,
      "no broker answered; the broker refused the connection",
    ],
    [`the sentinels of broker ${broker} know no master named "mymaster"`, `the sentinels of the broker know no master named "mymaster"`],
    // A reason about something else keeps it all.
    ["task instances queued longer than 5m on queue default", "task instances queued longer than 5m on queue default"],
    ["celery@w1 sent no heartbeat since 2026-12-02 06:03:53 UTC (one every 2s)", "celery@w1 sent no heartbeat since 2026-12-02 06:03:53 UTC (one every 2s)"],
    // Another broker, or one whose URL only begins like this one's.
    ["broker redis://127.0.0.1:6379/1 refused the connection", "broker redis://127.0.0.1:6379/1 refused the connection"],
    [`broker ${broker}0 refused the connection`, `broker ${broker}0 refused the connection`],
  ];
  for (const [reason, shown] of table) assert.equal(withoutInstance(reason, broker), shown, reason);

  // A failover list's instance names every broker: a reason naming one keeps it.
  const list = "redis://a:6379/0;redis://b:6379/0";
  assert.equal(
    withoutInstance("healthy through failover; not answering: broker redis://b:6379/0 refused the connection", list),
    "healthy through failover; not answering: broker redis://b:6379/0 refused the connection",
  );
  // A masked password is the same text in both.
  assert.equal(withoutInstance("broker redis://:***@b:6379/0 refused the connection", "redis://:***@b:6379/0"), "the broker refused the connection");
  // The command and HTTP checks name their program or URL.
  assert.equal(withoutInstance("check command /usr/local/bin/probe timed out after 4.5s", "/usr/local/bin/probe"), "check command timed out after 4.5s");
  assert.equal(withoutInstance("check command /usr/local/bin/probe: not found", "/usr/local/bin/probe"), "check command: not found");
  assert.equal(
    withoutInstance("GET http://probe:8080/health answered 503 Service Unavailable", "http://probe:8080/health"),
    "GET answered 503 Service Unavailable",
  );
  // Nothing else to say: the reason as it is. No instance, no reason: as they are.
  assert.equal(withoutInstance(broker, broker), broker);
  assert.equal(withoutInstance("not checked yet", ""), "not checked yet");
  assert.equal(withoutInstance("", broker), "");
  assert.equal(withoutInstance(null, broker), null);
});

test("the canary route under the UI's base", () => {
  assert.equal(canaryUrl("https://example.com/airflow/"), "https://example.com/airflow/overseer-card/canary");
});

test("pickup latencies in words", () => {
  const table = [
    [0, "0 ms"],
    [0.84, "840 ms"],
    [1.25, "1.3 s"],
    [9.94, "9.9 s"],
    [12.5, "12 s"],
    [150, "2 min"],
    [-1, "0 ms"],
  ];
  for (const [s, text] of table) assert.equal(latency(s), text, `${s} s`);
  assert.equal(latency(null), null);
});

test("the canary per queue: its state, a wait, the pickup and the last success, facts only", () => {
  const body = {
    dag_id: "overseer_canary",
    runs_read: 3,
    read_at: "2026-12-02T10:10:40+00:00",
    queues: [
      {
        queue: "default",
        state: "queued",
        pickup_seconds: 1.25,
        picked_up_at: "2026-12-02T10:05:01.25+00:00",
        last_success: "2026-12-02T10:05:02.5+00:00",
        waiting_since: "2026-12-02T10:10:00+00:00",
        waiting_seconds: 40,
      },
      { queue: "gpu", state: null, pickup_seconds: null, last_success: null, waiting_seconds: null },
    ],
  };
  const [main, gpu] = canaryView(body);
  assert.equal(main.queue, "default");
  assert.equal(main.state, "queued");
  assert.deepEqual(
    main.facts.map((f) => [f.id, f.text]),
    [
      ["waiting", "waiting in queued for 40 s"],
      ["pickup", "picked up in 1.3 s"],
      ["success", `last success ${timestamp(Date.parse("2026-12-02T10:05:02.5+00:00"))}, 5 min ago`],
    ],
  );
  assert.match(main.facts[1].title, /^from queued to started, started \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
  assert.equal(gpu.state, "no state yet");
  assert.deepEqual(gpu.facts.map((f) => f.text), ["no success in its latest 3 runs"]);
});

test("a canary that stopped running says for how long, as a fault, on every queue", () => {
  const body = {
    read_at: "2026-12-02T10:25:00+00:00",
    runs_read: 3,
    every_seconds: 60,
    silent_seconds: 360,
    queues: [
      { queue: "default", state: "success", last_success: "2026-12-02T10:19:01+00:00" },
      { queue: "gpu", state: "success", last_success: "2026-12-02T10:19:02+00:00" },
    ],
  };
  for (const q of canaryView(body)) {
    assert.equal(q.silent, true, q.queue);
    const fault = q.facts.filter((f) => f.fault);
    assert.deepEqual(fault.map((f) => [f.id, f.text]), [["silent", "not run for 6 min (every 1 min)"]]);
  }
  const running = canaryView({ ...body, silent_seconds: null });
  assert.ok(running.every((q) => !q.silent && !q.facts.some((f) => f.fault)));
});

test("no canary, nothing to show", () => {
  for (const body of [{ queues: [] }, {}, null, { queues: "x" }]) assert.deepEqual(canaryView(body), []);
});
