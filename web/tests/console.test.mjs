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
const GROUP = "console-readers";
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
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(STEP_MS);
    page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
    page.on("console", (m) => m.type() === "error" && errors.push(`console error: ${m.text()}`));
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

    log("a consumer group reads part of the messages and commits");
    await tinymq(["consume", TOPIC, "--group", GROUP, "--from-beginning", "--count", String(CONSUMED)]);

    log("the groups page shows the group and its lag");
    await page.click('nav a[data-section="groups"]');
    await page.waitForSelector(`#groups a[href="#/groups/${GROUP}"]`);
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
