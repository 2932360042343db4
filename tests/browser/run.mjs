// Browser tests of the Cockpit page: Debian's headless Chromium driven over the DevTools
// protocol (puppeteer-core; no browser is downloaded) against real cockpit-ws +
// cockpit-bridge + the mdev-manager daemon on the simulated host, over a private bus with
// polkitd. Each test is a step a user takes; every step leaves a screenshot in the output
// directory. Prints `N passed, M failed` and exits non-zero when any failed.
//
//   node tests/browser/run.mjs [--out DIR] [--only SUBSTRING]
// Needs: root, cockpit/dist built, target/debug/{mdev-manager,vgpuctl} built (MDEV_BIN_DIR
// to use others), /usr/bin/chromium (CHROMIUM to use another).

import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { REPO, Stack, freePort, launchChromium } from "./stack.mjs";
import { tests } from "./steps.mjs";

const argValue = name => {
    const at = process.argv.indexOf(name);
    return at > 0 ? process.argv[at + 1] : undefined;
};
const out = argValue("--out") || join(REPO, "tests/browser/out");
const only = argValue("--only");
mkdirSync(out, { recursive: true });
for (const old of readdirSync(out).filter(f => f.endsWith(".png")))
    rmSync(join(out, old)); // no screenshot of an earlier run passes for this one's

const stack = new Stack();
let browser;
let passed = 0;
let failed = 0;
try {
    await stack.startBus();
    await stack.startPolkitd();
    await stack.startService();
    stack.installPage();
    const adminUrl = await stack.startCockpitWs(await freePort());
    const viewer = stack.createUser("mdevcockpitro");
    const viewerUrl = await stack.startCockpitWs(await freePort(), viewer);
    browser = await launchChromium();
    const page = await browser.newPage();
    const consoleErrors = [];
    page.on("pageerror", error => consoleErrors.push(String(error)));
    const context = { stack, browser, page, adminUrl, viewerUrl, out, consoleErrors };
    for (const [name, body] of tests) {
        if (only && !name.includes(only))
            continue;
        const started = Date.now();
        try {
            await body(context);
            passed += 1;
            console.log(`ok   ${name} (${Date.now() - started} ms)`);
        } catch (error) {
            failed += 1;
            console.log(`FAIL ${name}: ${error.stack || error}`);
            await page.screenshot({ path: join(out, `FAILED-${name.replace(/[^a-z0-9]+/gi, "-")}.png`), fullPage: true }).catch(() => {});
        }
    }
    if (consoleErrors.length > 0)
        console.log(`page errors seen: ${consoleErrors.join(" | ")}`);
} catch (error) {
    failed += 1;
    console.log(`FAIL setting up the stack: ${error.stack || error}`);
} finally {
    if (browser)
        await browser.close().catch(() => {});
    await stack.stop();
}
console.log(`browser tests: screenshots in ${out}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
