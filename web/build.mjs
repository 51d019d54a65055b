// Builds the console into crates/http/console/ (committed, embedded in the binary):
// tsc compiles src/ into app.js, and static/ is copied beside it. With --check, builds into
// web/.check/ instead and fails when that differs from the committed files byte for byte.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const web = dirname(fileURLToPath(import.meta.url));
const committed = join(web, "..", "crates", "http", "console");
const check = process.argv.includes("--check");
const out = check ? join(web, ".check") : committed;
const files = ["index.html", "app.js", "style.css"];

if (check) rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const tsc = join(web, "node_modules", "typescript", "bin", "tsc");
execFileSync(process.execPath, [tsc, "-p", join(web, "tsconfig.json"), "--outFile", join(out, "app.js")], {
  stdio: "inherit",
});
copyFileSync(join(web, "static", "index.html"), join(out, "index.html"));
copyFileSync(join(web, "static", "style.css"), join(out, "style.css"));

if (check) {
  const stale = files.filter((f) => !readFileSync(join(out, f)).equals(readFileSync(join(committed, f))));
  rmSync(out, { recursive: true, force: true });
  if (stale.length) {
    console.error(`crates/http/console/ is not what web/ builds (${stale.join(", ")}): run npm run build in web/`);
    process.exit(1);
  }
  console.log("crates/http/console/ matches a fresh build of web/");
}
