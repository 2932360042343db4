// Benchmark of the Cockpit page in Debian's headless Chromium against real cockpit-ws and the
// daemon on the simulated `scale` host with 384 instances (the inventory benchmark's host):
//
//  1. first full render: from the start of navigation to the first React commit showing the
//     whole page (8 GPUs, 144 types, 384 instances), over fresh page loads;
//  2. a create from the CLI: `vgpuctl create` on the same bus while the page is open, until
//     the new instance's row is in the page's DOM. The D-Bus reply falls between the start
//     and the end of the vgpuctl process; the figure reported is from the START of the call,
//     an upper bound on "after the reply".
//
// Writes bench/cockpit/RESULTS.md (the style of bench/RESULTS.md). Not a test: nothing fails
// on a number. Run with bench/cockpit/run [--rounds N].

import { execSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { REPO, Stack, freePort, launchChromium } from "../../tests/browser/stack.mjs";

const at = process.argv.indexOf("--rounds");
const rounds = at > 0 ? Number(process.argv[at + 1]) : 20;
const INSTANCES = 384;

const PROFILE = `# Benchmark profile (bench/cockpit/page.mjs): the smallest type of the simulated scale GPUs.
[[profile]]
name = "bench-512m"
description = "Benchmark seat: 512 MiB of a simulated scale GPU"

[profile.pin]
type_id = "simgpu-1"
`;

function quantile(sorted, q) {
    const i = Math.min(sorted.length - 1, Math.max(0, Math.round(q * (sorted.length - 1))));
    return sorted[i];
}
function summary(values) {
    const s = values.slice().sort((a, b) => a - b);
    return { median: quantile(s, 0.5), p10: quantile(s, 0.1), p90: quantile(s, 0.9), n: s.length };
}
const ms = v => `${v.toFixed(v < 10 ? 2 : 1)} ms`;

const stack = new Stack();
let browser;
try {
    const profiles = mkdtempSync(join(stack.dir, "profiles-"));
    writeFileSync(join(profiles, "bench.toml"), PROFILE);
    await stack.startBus();
    await stack.startPolkitd();
    await stack.startService("scale", ["--profiles-dir", profiles]);
    for (const count of [256, INSTANCES - 256]) {
        const r = stack.vgpuctl(["create", "bench-512m", "--count", String(count), "--placement", "spread"]);
        if (r.status !== 0)
            throw new Error(`vgpuctl create: ${r.stderr}`);
    }
    const listed = JSON.parse(stack.vgpuctl(["--json", "list"]).stdout).length;
    if (listed !== INSTANCES)
        throw new Error(`the host has ${listed} instances, not ${INSTANCES}`);
    stack.installPage();
    const url = await stack.startCockpitWs(await freePort());
    browser = await launchChromium();

    // 1. First full render, fresh page each round (after one warm-up load).
    const renders = [];
    const scriptStarts = [];
    const loads = [];
    const transports = [];
    for (let round = 0; round <= rounds; round++) {
        const page = await browser.newPage();
        await page.goto(url, { waitUntil: "domcontentloaded" });
        await page.waitForFunction(() => window.mdevManager && window.mdevManager.firstReadyRender !== undefined, { timeout: 60000 });
        const [rendered, rows, started, loaded, transport] = await page.evaluate(() => [window.mdevManager.firstReadyRender,
            document.querySelectorAll("#instance-table tbody tr[data-uuid]").length,
            window.mdevManager.started, window.mdevManager.loadedAt, window.mdevManager.transportReady]);
        if (rows !== INSTANCES)
            throw new Error(`first render showed ${rows} rows, not ${INSTANCES}`);
        if (round > 0) {
            renders.push(rendered);
            scriptStarts.push(started);
            loads.push(loaded - transport);
            transports.push(transport - started);
        }
        await page.close();
    }

    // 2. CLI create -> row in the page, with the page open on the 384-instance host.
    const page = await browser.newPage();
    await page.goto(url, { waitUntil: "domcontentloaded" });
    await page.waitForFunction(() => window.mdevManager && window.mdevManager.firstReadyRender !== undefined, { timeout: 60000 });
    await page.evaluate(() => {
        window.rowSeen = {};
        const body = document.querySelector("#instance-table tbody");
        new MutationObserver(records => {
            const now = Date.now();
            for (const record of records)
                for (const node of record.addedNodes)
                    if (node.dataset && node.dataset.uuid && !(node.dataset.uuid in window.rowSeen))
                        window.rowSeen[node.dataset.uuid] = now;
        }).observe(body, { childList: true });
    });
    const fromStart = [];
    const signalFromStart = [];
    const cliTimes = [];
    for (let round = 0; round <= rounds; round++) {
        const started = Date.now();
        const r = stack.vgpuctl(["create", "bench-512m"]);
        const ended = Date.now();
        if (r.status !== 0)
            throw new Error(`vgpuctl create: ${r.stderr}`);
        const uuid = r.stdout.trim();
        await page.waitForFunction(u => u in window.rowSeen, { timeout: 10000 }, uuid);
        const [seen, added] = await page.evaluate(u => [window.rowSeen[u], window.mdevManager.lastAdded], uuid);
        if (round > 0) {
            signalFromStart.push(added.at - started);
            fromStart.push(seen - started);
            cliTimes.push(ended - started);
        }
        stack.vgpuctl(["destroy", uuid]);
        await page.waitForFunction(u => !document.querySelector(`#instance-table tr[data-uuid="${u}"]`), { timeout: 10000 }, uuid);
    }

    const render = summary(renders);
    const scriptStart = summary(scriptStarts);
    const load = summary(loads);
    const transport = summary(transports);
    const create = summary(fromStart);
    const cli = summary(cliTimes);
    const signal = summary(signalFromStart);
    const commit = execSync("git rev-parse --short HEAD", { cwd: REPO, encoding: "utf8" }).trim();
    const chromium = execSync("/usr/bin/chromium --version", { encoding: "utf8" }).trim();
    const cockpitVersion = execSync("dpkg-query -W -f='${Version}' cockpit-ws", { encoding: "utf8" }).trim();
    const now = new Date().toISOString().replace("T", " ").substring(0, 16);
    const row = (what, s, target, met) =>
        `| 7 | ${what} | ${ms(s.median)} | ${ms(s.p10)} – ${ms(s.p90)} (n=${s.n}) | ${target} | ${met ? "yes" : "**no**"} |`;
    const text = `# Cockpit page benchmark

Written by \`bench/cockpit/run\` on ${now} UTC at commit \`${commit}\`. What the figures mean:
[docs/benchmarks.md](../../docs/benchmarks.md#7-the-cockpit-page). Medians with the 10th–90th percentile spread.

| | |
|---|---|
| CPUs (nproc) | ${os.cpus().length} |
| load average at end (1, 5, 15 min) | ${os.loadavg().map(v => v.toFixed(2)).join(" ")} |
| browser | ${chromium}, headless, driven by puppeteer-core |
| cockpit-ws / cockpit-bridge | ${cockpitVersion} |
| host | simulated \`scale\` (8 parents, 144 types) with ${INSTANCES} instances |

| # | measurement | median | p10 – p90 | target | met |
|---|---|---|---|---|---|
${row(`first full render (navigation start → whole page committed, ${INSTANCES} rows)`, render, "≤ 1 s", render.median <= 1000)}
${row("CLI create → row in the page, from the START of the vgpuctl call (upper bound on after-the-reply)", create, "≤ 200 ms after the reply", create.median <= 200)}
| 7 | of which: navigation start → the page's script runs (cockpit.js, index.js, CSS) | ${ms(scriptStart.median)} | ${ms(scriptStart.p10)} – ${ms(scriptStart.p90)} (n=${scriptStart.n}) | | |
| 7 | of which: script start → Cockpit's channel to the bridge is up | ${ms(transport.median)} | ${ms(transport.p10)} – ${ms(transport.p90)} (n=${transport.n}) | | |
| 7 | of which: channel up → GetManagedObjects + GetPermissions answered through the bridge | ${ms(load.median)} | ${ms(load.p10)} – ${ms(load.p90)} (n=${load.n}) | | |
| 7 | of which: the START of the vgpuctl call → its InterfacesAdded signal reaches the page | ${ms(signal.median)} | ${ms(signal.p10)} – ${ms(signal.p90)} (n=${signal.n}) | | |
| 7 | \`vgpuctl create\` itself (process start to exit; the reply falls inside) | ${ms(cli.median)} | ${ms(cli.p10)} – ${ms(cli.p90)} (n=${cli.n}) | | |

* Render: ${rounds} fresh page loads after one warm-up, each through cockpit-ws and the bridge: GetManagedObjects of the whole tree, then one React render of 8 GPU cards with 144 capacity bars, the ${INSTANCES}-row instance table and the scheduling tables.
* Create: ${rounds} rounds after one warm-up; each creates one instance with \`vgpuctl create bench-512m\` while the page is open, waits for its row (a MutationObserver stamps it), then destroys it. The page learns of it only from the service's InterfacesAdded signal (no polling).
`;
    writeFileSync(join(REPO, "bench/cockpit/RESULTS.md"), text);
    console.log(text);
} finally {
    if (browser)
        await browser.close().catch(() => {});
    await stack.stop();
}
