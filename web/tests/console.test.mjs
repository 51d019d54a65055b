// The console seen by a browser: headless Debian Chromium, driven by playwright-core, against
// a running tinymq node. Run by crates/cli/tests/console_browser.rs, which starts the node and
// passes, in the environment:
//   CONSOLE_URL      the node's HTTP listener (http://127.0.0.1:PORT)
//   TINYMQ_BIN       the tinymq binary, to produce and consume as a user would
//   TINYMQ_BOOTSTRAP the node's native address
//   SCREENSHOT_DIR   where a PNG of every page goes
// Exits 0 when every step saw what it should, 1 with the failing step otherwise.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const url = env("CONSOLE_URL");
const bin = env("TINYMQ_BIN");
const shots = env("SCREENSHOT_DIR");
const TOPIC = "console-orders";
const FAILED = "console-orders-failed";
const GROUP = "console-readers";
const SHARE_GROUP = "console-workers";
const ROUTE = "console-eu";
const PRODUCED = 200;
const CONSUMED = 60;
const STEP_MS = 45_000;

// Without these Chromium waits on network services this machine cannot reach.
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

let step = "start";
const log = (what) => {
  step = what;
  console.log(`console test: ${what}`);
};

/** Runs `tinymq ARGS` with `input` on stdin; resolves with stdout, rejects on failure. */
function tinymq(args, input = "") {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { env: { ...process.env, TINYMQ_LOG: "warn" } });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`tinymq ${args.join(" ")} exited ${code}: ${err}`)),
    );
    child.stdin.end(input);
  });
}

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

/** A REST call as the console makes it; resolves with the status and the parsed body. */
async function rest(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(`${url}/api/v1${path}`, init);
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

/** Edits one setting in place on a topic page: Edit, type, Save. */
async function editSetting(page, key, value) {
  await page.click(`button[data-edit="${key}"]`);
  await page.fill(`form[data-setting="${key}"] input`, value);
  await page.click(`form[data-setting="${key}"] button[type="submit"]`);
}

async function cellTexts(page, selector, column) {
  return page.$$eval(selector, (rows, i) => rows.map((r) => r.cells[i]?.textContent ?? ""), column);
}

async function main() {
  mkdirSync(shots, { recursive: true });
  const profile = mkdtempSync(join(tmpdir(), "tinymq-console-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 900 },
  });
  const errors = [];
  const failedLoads = [];
  let refusalsExpected = 0;
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(STEP_MS);
    page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
    // A refusal the test provokes is logged by Chromium as a failed load: counted against the
    // ones the steps expect, any other is an error.
    page.on("console", (m) => {
      if (m.type() !== "error") return;
      if (/^Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) failedLoads.push(m.text());
      else errors.push(`console error: ${m.text()}`);
    });
    // The page may fetch only its own origin (the CSP says so; this checks it did).
    page.on("request", (r) => !r.url().startsWith(url) && errors.push(`request off the node: ${r.url()}`));

    log("the overview shows the broker, the quorum and its leader");
    await page.goto(`${url}/#/overview`);
    await page.waitForSelector("#brokers tbody tr .badge.ok");
    await page.waitForFunction(() => /node \d+/.test(document.querySelector("#meta-leader")?.textContent ?? ""));
    await page.waitForSelector("#under-replicated");

    log("create a topic through the form");
    await page.click('nav a[data-section="topics"]');
    await page.fill('#create-topic input[name="name"]', TOPIC);
    await page.fill('#create-topic input[name="partitions"]', "2");
    await page.click('#create-topic button[type="submit"]');
    await page.waitForSelector(`#topics a[href="#/topics/${TOPIC}"]`);
    await shot(page, "topics");

    log("produce through the CLI; the throughput chart moves");
    await page.click('nav a[data-section="overview"]');
    await page.waitForSelector("#chart-records");
    const produced = (async () => {
      // Four batches a little apart, so more than one scrape interval sees records arrive.
      for (let b = 0; b < 4; b++) {
        const lines = [];
        for (let i = b * (PRODUCED / 4); i < (b + 1) * (PRODUCED / 4); i++) {
          lines.push(`k${i % 5}|{"n":${i},"note":"<b>not markup</b>","tags":["a","b"]}`);
        }
        await tinymq(["produce", TOPIC, "--key-separator", "|", "--header", "source=console-test"], lines.join("\n") + "\n");
        await new Promise((r) => setTimeout(r, 700));
      }
    })();
    await page.waitForFunction(() => Number(document.querySelector("#rate-records-in")?.getAttribute("data-rate")) > 0);
    await page.waitForFunction(() => Number(document.querySelector("#chart-bytes")?.getAttribute("data-max")) > 0);
    await produced;
    await shot(page, "overview");

    log("the topic's partitions hold every message");
    await page.goto(`${url}/#/topics/${TOPIC}`);
    await page.waitForFunction(
      (n) => {
        const rows = [...document.querySelectorAll("#partitions tbody tr")];
        return rows.length === 2 && rows.reduce((s, r) => s + Number(r.cells[7].textContent.replace(/,/g, "")), 0) === n;
      },
      PRODUCED,
    );
    await shot(page, "topic-detail");

    log("settings are shown in human units and edited in place, with the server's checks");
    await page.waitForFunction(() => {
      const rows = [...document.querySelectorAll("#topic-config tbody tr")];
      const row = rows.find((r) => r.cells[0].textContent === "max_delivery_attempts");
      return row && row.cells[1].textContent === "5";
    });
    await editSetting(page, "retention_ms", "604800000");
    await page.waitForFunction(() =>
      [...document.querySelectorAll("#topic-config tbody tr")].some(
        (r) => r.cells[0].textContent === "retention_ms" && r.cells[1].querySelector(".human")?.textContent === "7 d",
      ),
    );
    await editSetting(page, "segment_bytes", String(1024 ** 3));
    await page.waitForFunction(() =>
      [...document.querySelectorAll("#topic-config tbody tr")].some(
        (r) => r.cells[0].textContent === "segment_bytes" && r.cells[1].querySelector(".human")?.textContent === "1 GiB",
      ),
    );
    // Refused as `topic alter` refuses it: the error shows, the editor stays open.
    refusalsExpected++;
    await editSetting(page, "max_delivery_attempts", "0");
    await page.waitForSelector('form[data-setting="max_delivery_attempts"] .error');
    const refusal = await page.textContent('form[data-setting="max_delivery_attempts"] .error');
    if (!refusal.includes("INVALID_CONFIG")) throw new Error(`a bad max_delivery_attempts said: ${refusal}`);
    await shot(page, "topic-setting-refused");
    await page.fill('form[data-setting="max_delivery_attempts"] input', "7");
    await page.click('form[data-setting="max_delivery_attempts"] button[type="submit"]');
    await page.waitForFunction(() =>
      [...document.querySelectorAll("#topic-config tbody tr")].some(
        (r) => r.cells[0].textContent === "max_delivery_attempts" && r.cells[1].textContent === "7",
      ),
    );
    await editSetting(page, "dead_letter_topic", FAILED);
    await page.waitForSelector(`#dead-letter-link a[href="#/topics/${FAILED}"]`);
    const told = await page.textContent("#dead-letter-link");
    if (!told.includes("7 delivery attempts")) throw new Error(`the dead-letter line says: ${told}`);
    await shot(page, "topic-settings");

    log("the dead-letter topic is marked in the list, linked to its source");
    await tinymq(["topic", "create", FAILED]);
    await page.click('nav a[data-section="topics"]');
    await page.waitForSelector(`#topics .dlq-mark[data-dead-letters-of="${TOPIC}"] a[href="#/topics/${TOPIC}"]`);
    const heading = await page.textContent("#topic-list h2");
    if (heading !== "2 topics") throw new Error(`the list is headed ${heading}`);
    await shot(page, "topics-dead-letters");

    log("add partitions to the dead-letter topic");
    await page.click(`#topics a[href="#/topics/${FAILED}"]`);
    await page.waitForSelector('#topic-detail[data-partitions="1"]');
    const single = await page.textContent("#topic-detail h2");
    if (single !== "1 partition") throw new Error(`one partition is headed ${single}`);
    await page.fill('#add-partitions input[name="partitions"]', "3");
    await page.click('#add-partitions button[type="submit"]');
    await page.waitForSelector('#topic-detail[data-partitions="3"]');
    // Fewer than it has is refused, and said.
    refusalsExpected++;
    await page.fill('#add-partitions input[name="partitions"]', "2");
    await page.click('#add-partitions button[type="submit"]');
    await page.waitForSelector("#add-partitions .error");

    log("produce a record through the form");
    await page.fill('#produce-form input[name="key"]', "form-key");
    await page.fill('#produce-form input[name="partition"]', "0");
    await page.fill('#produce-form textarea[name="value"]', "made by the form");
    await page.fill('#produce-form textarea[name="headers"]', "origin=console\nflag");
    await page.click('#produce-form button[type="submit"]');
    await page.waitForSelector('#produce-status[data-offset="0"][data-partition="0"]');
    await shot(page, "topic-produce");
    // A value that is not UTF-8, beside it (the form writes text; the API takes base64).
    const binary = await rest("POST", `/topics/${FAILED}/messages`, { value: "/wD+", value_encoding: "base64", partition: 0 });
    if (binary.status !== 200) throw new Error(`binary produce: ${JSON.stringify(binary)}`);

    log("the message list marks the binary value and shows the form's record");
    await page.goto(`${url}/#/messages?topic=${FAILED}&partition=0&offset=0&limit=1`);
    await page.waitForSelector("li.message");
    const one = await page.textContent("#messages-summary");
    if (!one.startsWith("1 message read")) throw new Error(`one record is summed up as: ${one}`);
    const formRecord = await page.textContent("li.message");
    if (!formRecord.includes("made by the form") || !formRecord.includes("origin") || !formRecord.includes("form-key")) {
      throw new Error(`the form's record shows as: ${formRecord}`);
    }
    await page.goto(`${url}/#/messages?topic=${FAILED}&partition=0&offset=1&limit=10`);
    await page.waitForSelector("li.message .badge.binary");
    const mark = await page.textContent("li.message .badge.binary");
    if (!mark.includes("binary")) throw new Error(`the binary mark says: ${mark}`);
    await shot(page, "messages-binary");

    log("the message browser shows headers and pretty-printed JSON, as text");
    await page.click('nav a[data-section="messages"]');
    await page.waitForSelector(`#message-form select[name="topic"] option[value="${TOPIC}"]`, { state: "attached" });
    await page.selectOption('#message-form select[name="topic"]', TOPIC);
    await page.fill('#message-form input[name="partition"]', "0");
    await page.fill('#message-form input[name="offset"]', "0");
    await page.fill('#message-form input[name="limit"]', "10");
    await page.click('#message-form button[type="submit"]');
    await page.waitForSelector("li.message pre.payload.json");
    const shown = await page.$$eval("li.message", (els) => els.map((e) => Number(e.getAttribute("data-offset"))));
    if (shown.join() !== [...Array(10).keys()].join()) throw new Error(`offsets shown: ${shown}`);
    const payload = await page.textContent("li.message pre.payload.json");
    if (!payload.includes('\n  "n": ') || !payload.includes("<b>not markup</b>")) {
      throw new Error(`payload not pretty-printed as text: ${payload}`);
    }
    if ((await page.$$("li.message b")).length !== 0) throw new Error("a payload was parsed as HTML");
    const header = await page.textContent("li.message dl.headers");
    if (!header.includes("source") || !header.includes("console-test")) throw new Error(`headers: ${header}`);
    await shot(page, "messages");

    log("read from a time instead of an offset");
    const before = new Date(Date.now() - 10 * 60_000).toISOString().slice(0, 19);
    await page.selectOption('#message-form select[name="from"]', "time");
    await page.fill('#message-form input[name="time"]', before);
    await page.click('#message-form button[type="submit"]');
    await page.waitForSelector('#messages[data-query*="timestamp_ms="] li.message');
    const first = await page.getAttribute("li.message", "data-offset");
    if (first !== "0") throw new Error(`from ten minutes ago the first record shown is ${first}`);
    await page.selectOption('#message-form select[name="from"]', "offset");

    log("filter the page by key");
    const key = await page.textContent("li.message code.key");
    await page.fill('#message-form input[name="key"]', key);
    await page.click('#message-form button[type="submit"]');
    await page.waitForFunction((k) => (document.querySelector("#messages-summary")?.textContent ?? "").includes(`with key “${k}”`), key);
    const keys = await page.$$eval("li.message code.key", (els) => els.map((e) => e.textContent));
    if (keys.length === 0 || keys.some((k) => k !== key)) throw new Error(`filtered by ${key}, shown ${keys}`);
    await shot(page, "messages-by-key");

    log("the compact table shows 50 records in one screen, each expandable");
    await page.goto(`${url}/#/messages?topic=${TOPIC}&partition=0&offset=0&limit=50&view=table`);
    await page.waitForSelector("#messages-table tr.message-row");
    const rows = await page.$$eval("#messages-table tr.message-row", (rs) => rs.map((r) => r.getBoundingClientRect().height));
    if (rows.length !== 50) throw new Error(`the table shows ${rows.length} rows`);
    const height = rows.reduce((s, h) => s + h, 0);
    const screen = page.viewportSize().height;
    if (height > screen) throw new Error(`50 rows take ${height} px, more than the ${screen} px screen`);
    await shot(page, "messages-table");
    await page.click('#messages-table tr.message-row[data-offset="3"]');
    await page.waitForSelector("#messages-table tr.message-detail:not([hidden]) pre.payload.json");
    const opened = await page.$$eval("#messages-table tr.message-detail:not([hidden])", (rs) => rs.length);
    if (opened !== 1) throw new Error(`${opened} rows open after one click`);
    await shot(page, "messages-table-expanded");

    log("a consumer group reads part of the messages and commits");
    await tinymq(["consume", TOPIC, "--group", GROUP, "--from-beginning", "--count", String(CONSUMED)]);

    log("the groups page shows the group and its lag");
    await page.click('nav a[data-section="groups"]');
    await page.waitForSelector(`#groups a[href="#/groups/${GROUP}"]`);
    const groupRow = await page.$$eval(`#groups tbody tr`, (rs, g) => {
      const r = rs.find((row) => row.cells[0].textContent === g);
      return r ? [...r.cells].map((c) => c.textContent) : [];
    }, GROUP);
    if (groupRow[1] !== "consumer") throw new Error(`the group's row: ${groupRow}`);
    // The lag column: the groups list carries it once the groups REST has it ("—" before).
    await page
      .waitForFunction((want) => {
        const r = [...document.querySelectorAll("#groups tbody tr")].find((row) => row.cells[0].textContent === want[0]);
        const lag = r?.querySelector(".lag")?.getAttribute("data-lag");
        return lag === "" || Number(lag) === want[1];
      }, [GROUP, PRODUCED - CONSUMED], { timeout: 15000 });
    await shot(page, "groups");
    await page.click(`#groups a[href="#/groups/${GROUP}"]`);
    // The page refreshes on its own: wait for the lag the commits make (a render from before
    // every partition's offsets were in may show less), then check it below.
    const expected = PRODUCED - CONSUMED;
    await page
      .waitForFunction((want) => {
        const lags = [...document.querySelectorAll("#group-offsets .lag")].map((e) => Number(e.getAttribute("data-lag")));
        return lags.reduce((s, l) => s + l, 0) === want;
      }, expected, { timeout: 15000 })
      .catch(() => {});
    const lags = await page.$$eval("#group-offsets .lag", (els) => els.map((e) => Number(e.getAttribute("data-lag"))));
    const total = lags.reduce((s, l) => s + l, 0);
    // The CLI commits exactly what it printed, in every partition it was assigned.
    if (total !== expected) throw new Error(`lag ${lags} after consuming ${CONSUMED} of ${PRODUCED}`);
    const bars = await page.$$eval("#lag-chart g[data-value]", (gs) => gs.map((g) => Number(g.getAttribute("data-value"))));
    if (!bars.some((v) => v > 0)) throw new Error(`the lag chart shows ${bars}`);
    await shot(page, "group-detail");

    log("a live member shows with its assignment, and the lag falls to 0");
    // Reads the rest, then stays a member until nothing new arrives for 10 s. Two waits, not
    // one: the member shows while it lives (the page refreshes every 2 s), and the lag, once
    // committed, stays 0 after it leaves; one condition over both raced the member's exit on a
    // loaded machine.
    const member = tinymq(["consume", TOPIC, "--group", GROUP, "--timeout-ms", "10000"]);
    await page.waitForFunction(
      (topic) =>
        [...document.querySelectorAll("#members tbody tr")].some((r) =>
          (r.cells[2]?.textContent ?? "").includes(`${topic}: 0, 1`),
        ),
      TOPIC,
      { timeout: 60_000 },
    );
    await page.waitForFunction(
      () => {
        const lags = [...document.querySelectorAll("#group-offsets .lag")].map((e) => e.getAttribute("data-lag"));
        return lags.length === 2 && lags.every((l) => l === "0");
      },
      undefined,
      { timeout: 60_000 },
    );
    await shot(page, "group-live");
    await member;

    log("reset the group's offsets: the plan first, nothing changed until confirmed");
    // The member has left; the page shows no member before the reset may run.
    await page.waitForFunction(() => document.querySelectorAll("#members tbody tr td.empty").length === 1, undefined, {
      timeout: 60_000,
    });
    await page.selectOption('#reset-form select[name="topic"]', TOPIC);
    await page.selectOption('#reset-form select[name="to"]', "earliest");
    await page.click('#reset-form button[type="submit"]');
    await page.waitForSelector("#reset-plan-table tbody tr");
    const planned = await cellTexts(page, "#reset-plan-table tbody tr", 2);
    if (planned.join() !== "0,0") throw new Error(`the plan moves to ${planned}`);
    const still = await page.$$eval("#group-offsets .lag", (els) => els.map((e) => e.getAttribute("data-lag")));
    if (!still.every((l) => l === "0")) throw new Error(`the plan alone changed the lag: ${still}`);
    await shot(page, "group-reset-plan");
    await page.click("#reset-confirm");
    await page.waitForSelector('#reset-status[data-done="true"]');
    await page.waitForFunction(
      (want) => {
        const lags = [...document.querySelectorAll("#group-offsets .lag")].map((e) => Number(e.getAttribute("data-lag")));
        return lags.length === 2 && lags.reduce((s, l) => s + l, 0) === want;
      },
      PRODUCED,
      { timeout: 15000 },
    );
    await shot(page, "group-reset");

    log("a share group has a page of its own");
    await tinymq(["consume", FAILED, "--share-group", SHARE_GROUP, "--count", "1"]);
    const shared = await rest("GET", `/groups/${SHARE_GROUP}`);
    await page.goto(`${url}/#/groups/${SHARE_GROUP}`);
    if (shared.status === 200 && shared.body?.type === "share") {
      await page.waitForSelector('#group-detail[data-type="share"] #share-partitions tbody tr');
      await shot(page, "group-share");
    } else {
      // Until the groups REST describes share groups (issue 27, item 9) the page says what
      // the server said.
      refusalsExpected++;
      await page.waitForSelector("#group-detail .error");
      console.log(`console test: share groups not described by this node yet (${shared.status}): error shown`);
      // And the page draws the shape the groups API is to answer (docs/rest.md), served here
      // in its place, so the share view is checked before that API exists.
      const documented = {
        group_id: SHARE_GROUP,
        type: "share",
        state: "stable",
        members: ["member-a"],
        partitions: [
          {
            topic: FAILED, partition: 0, start_offset: 1, end_offset: 2, high_watermark: 2,
            acquired: 1, available: 0, accepted: 1, dead_lettered: 0, not_yet_delivered: 0,
            in_flight: [{ offset: 1, state: "acquired", delivery_count: 2, member_id: "member-a", lock_deadline_ms: Date.now() + 30_000 }],
          },
        ],
      };
      await page.route(`${url}/api/v1/groups/${SHARE_GROUP}`, (r) =>
        r.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify(documented) }),
      );
      await page.reload();
      await page.waitForSelector('#group-detail[data-type="share"] #share-in-flight tbody tr');
      const flight = await cellTexts(page, "#share-in-flight tbody tr", 4);
      if (flight.join() !== "2") throw new Error(`in flight, delivery counts ${flight}`);
      if ((await page.$$("#offset-reset form")).length !== 0) throw new Error("a share group offered a consumer offset reset");
      await shot(page, "group-share");
      await page.unroute(`${url}/api/v1/groups/${SHARE_GROUP}`);
    }

    log("the routes page lists a route with its progress");
    await tinymq(["route", "add", ROUTE, "--from", TOPIC, "--to", FAILED, "--filter", "header.source = 'console-test'"]);
    await page.click('nav a[data-section="routes"]');
    await page.waitForFunction((name) =>
      [...document.querySelectorAll("#routes tbody tr")].some((r) => r.cells[0].textContent === name),
      ROUTE,
    );
    const route = await page.$$eval("#routes tbody tr", (rs) => [...rs[0].cells].map((c) => c.textContent));
    if (route[1] !== TOPIC || route[2] !== FAILED || !route[3].includes("console-test")) {
      throw new Error(`the route row: ${route}`);
    }
    await shot(page, "routes");

    log("in and out are both visible when equal: out dashed over a wider in");
    await page.click('nav a[data-section="overview"]');
    // Polled until both lines are in the page and styled: the chart redraws on every refresh,
    // and a line read just as it is replaced has no computed style yet.
    const drawn = await page.waitForFunction(() => {
      const line = (cls) => document.querySelector(`#chart-records polyline.${cls}`);
      const [lineIn, lineOut] = [line("in"), line("out")];
      if (!lineIn || !lineOut || !lineIn.isConnected || !lineOut.isConnected) return null;
      const [styleIn, styleOut] = [getComputedStyle(lineIn), getComputedStyle(lineOut)];
      const found = {
        inWidth: parseFloat(styleIn.strokeWidth),
        outWidth: parseFloat(styleOut.strokeWidth),
        dash: styleOut.strokeDasharray,
      };
      return Number.isFinite(found.inWidth) && Number.isFinite(found.outWidth) ? found : null;
    });
    const styles = await drawn.jsonValue();
    if (!(styles.inWidth > styles.outWidth) || styles.dash === "none") {
      throw new Error(`equal lines would hide one another: ${JSON.stringify(styles)}`);
    }
    await shot(page, "overview-end");

    if (failedLoads.length > refusalsExpected) {
      errors.push(`${failedLoads.length} refused requests, ${refusalsExpected} expected:\n${failedLoads.join("\n")}`);
    }
    if (errors.length) throw new Error(errors.join("\n"));
    console.log(`console test: passed; screenshots in ${shots}`);
  } catch (e) {
    const page = context.pages()[0];
    if (page) await shot(page, "failure").catch(() => {});
    if (errors.length) console.error(errors.join("\n"));
    throw e;
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

// The whole run's bound, above any few of its steps' own timeouts together (the Rust test
// allows 450 s); a step that passes its own timeout fails first, naming itself.
const deadline = setTimeout(() => {
  console.error(`console test: timed out at step "${step}"`);
  process.exit(1);
}, 420_000);
main().then(
  () => {
    clearTimeout(deadline);
    process.exit(0);
  },
  (e) => {
    console.error(`console test: FAILED at step "${step}": ${e.stack ?? e}`);
    process.exit(1);
  },
);
