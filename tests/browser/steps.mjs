// The browser test steps, in order (later steps build on what earlier ones created). Each
// asserts what the page shows against what the service says (vgpuctl on the same bus).

import assert from "node:assert/strict";
import { join } from "node:path";

const READY = '#mdev-manager[data-state="ready"]';
const ROWS = "#instance-table tbody tr[data-uuid]";

async function shot({ page, out }, name) {
    await page.screenshot({ path: join(out, `${name}.png`), fullPage: true });
}

/** Sets a React-controlled text input: select what is there, then type (or clear). */
async function setField(page, selector, value) {
    await page.click(selector, { clickCount: 3 });
    await page.keyboard.down("Control");
    await page.keyboard.press("a");
    await page.keyboard.up("Control");
    await page.keyboard.press("Backspace");
    if (value !== "")
        await page.type(selector, String(value));
}

async function rowUuids(page) {
    return page.$$eval(ROWS, rows => rows.map(r => r.dataset.uuid));
}

function json(stack, args) {
    const r = stack.vgpuctl(["--json", ...args]);
    assert.equal(r.status, 0, `vgpuctl ${args.join(" ")}: ${r.stderr}`);
    return JSON.parse(r.stdout);
}

/** Fills the create form; unset fields are cleared. */
async function fillCreate(page, { profile, count = 1, parent = "", wait = "" }) {
    await page.select("#create-profile", profile);
    await setField(page, "#create-count", count);
    await setField(page, "#create-parent", parent);
    await setField(page, "#create-wait", wait);
}

/** Submits the create form and waits for the answer to this submission (data-attempt). */
async function submitCreate(page) {
    const attempt = await page.$eval("#create-form", f => Number(f.dataset.attempt));
    await page.click("#create-submit");
    await page.waitForSelector(`#create-result[data-attempt="${attempt + 1}"], #create-error[data-attempt="${attempt + 1}"]`, { timeout: 30000 });
}

export const tests = [
    ["the page loads through cockpit-ws and shows the simulated GPUs and their types", async ctx => {
        const { page, adminUrl, stack } = ctx;
        await page.goto(adminUrl, { waitUntil: "domcontentloaded" });
        await page.waitForSelector(READY, { timeout: 30000 });
        const shown = await page.$$eval(".mdev-parent", cards => cards.map(c => c.dataset.parent).sort());
        const parents = json(stack, ["parents"]).map(p => p.name).sort();
        assert.deepEqual(shown, parents);
        const types = await page.$$eval(".mdev-type", els => els.map(e => `${e.dataset.parent} ${e.dataset.type}`).sort());
        const served = json(stack, ["types"]).map(t => `${t.parent} ${t.id}`).sort();
        assert.deepEqual(types, served);
        assert.ok(types.length > 0, "the simulated host offers mdev types");
        await page.evaluate(() => { window.notReloaded = true });
        await shot(ctx, "01-gpus");
    }],

    ["creating two instances from a profile shows both without a reload", async ctx => {
        const { page, stack } = ctx;
        const before = new Set(await rowUuids(page));
        // AMD MxGPU VFs: its scheduler (GIM time slices) takes weights, the next step needs that.
        await fillCreate(page, { profile: "amd-mxgpu-vf", count: 2 });
        await submitCreate(page);
        const text = await page.$eval("#create-result, #create-error", e => e.textContent);
        assert.match(text, /Created 2 instances from amd-mxgpu-vf/);
        const created = json(stack, ["list"]).map(i => i.uuid).filter(u => !before.has(u));
        assert.equal(created.length, 2, "the service has two new instances");
        await page.waitForFunction((uuids, rows) => uuids.every(u => document.querySelector(`${rows}[data-uuid="${u}"]`)),
                                   { timeout: 10000 }, created, ROWS);
        assert.equal(await page.evaluate(() => window.notReloaded), true, "the page was not reloaded");
        ctx.created = created;
        await shot(ctx, "02-instances-created");
    }],

    ["changing a weight changes the effective share the service reports", async ctx => {
        const { page } = ctx;
        const [first, second] = ctx.created.slice().sort();
        const row = uuid => `.mdev-schedule tr[data-uuid="${uuid}"]`;
        const effective = uuid => page.$eval(`${row(uuid)} .sched-effective`, e => e.textContent);
        const before = [await effective(first), await effective(second)];
        await setField(page, `${row(first)} .sched-weight input, ${row(first)} input.sched-weight`, "300");
        await page.click(`${row(first)} .sched-save`);
        await page.waitForFunction((sel, was) => document.querySelector(sel)?.textContent !== was,
                                   { timeout: 10000 }, `${row(first)} .sched-effective`, before[0]);
        const after = [await effective(first), await effective(second)];
        assert.ok(parseFloat(after[0]) > parseFloat(after[1]),
                  `weight 300 vs 100 gives the first the larger share: before ${before}, after ${after}`);
        await page.$eval(`${row(first)}`, e => e.scrollIntoView());
        await shot(ctx, "03-weight-changed");
    }],

    ["a request that does not fit shows the service's own message", async ctx => {
        const { page, stack } = ctx;
        await fillCreate(page, { profile: "nvidia-t4-2q", count: 200 });
        await submitCreate(page);
        const [title, message] = await page.$eval("#create-error", e => [
            e.querySelector(".pf-v6-c-alert__title")?.textContent || "",
            e.querySelector(".pf-v6-c-alert__description")?.textContent.trim() || ""]);
        assert.match(title, /NoCapacity/);
        const cli = stack.vgpuctl(["create", "nvidia-t4-2q", "--count", "200"]);
        assert.notEqual(cli.status, 0);
        assert.ok(message.length > 10 && cli.stderr.includes(message.substring(0, 60)),
                  `page shows the service's message: page "${message}", vgpuctl "${cli.stderr.trim()}"`);
        await page.$eval("#create-error", e => e.scrollIntoView());
        await shot(ctx, "04-no-capacity");
    }],

    ["a job waiting for its parent can be cancelled from the page", async ctx => {
        const { page } = ctx;
        await fillCreate(page, { profile: "nvidia-t4-2q", count: 1, parent: "0000:99:00.0", wait: 60 });
        await submitCreate(page);
        const text = await page.$eval("#create-result, #create-error", e => e.textContent);
        assert.match(text, /Started job/);
        await page.waitForSelector("#job-table .job-cancel", { timeout: 10000 });
        await page.$eval("#jobs", e => e.scrollIntoView());
        await shot(ctx, "05-job-waiting");
        await page.click("#job-table .job-cancel");
        await page.waitForSelector('#recent-jobs li[data-result="cancelled"]', { timeout: 15000 });
        await page.waitForFunction(() => !document.querySelector("#job-table"), { timeout: 10000 });
        await shot(ctx, "06-job-cancelled");
        await fillCreate(page, { profile: "nvidia-t4-2q", count: 1 });
    }],

    ["a persistent instance is stopped, started and loses autostart from its row", async ctx => {
        const { page, stack } = ctx;
        const before = new Set(json(stack, ["list"]).map(i => i.uuid));
        await fillCreate(page, { profile: "nvidia-t4-2q", count: 1 });
        await page.click("#create-autostart");
        await submitCreate(page);
        await page.click("#create-autostart"); // unticked again for the later steps
        const made = json(stack, ["list"]).find(i => !before.has(i.uuid));
        assert.ok(made && made.persistent && made.autostart, "the service made a persistent autostart instance");
        const row = `${ROWS}[data-uuid="${made.uuid}"]`;
        const cell = label => page.$eval(`${row} td[data-label="${label}"]`, e => e.textContent);
        const service = () => json(stack, ["list"]).find(i => i.uuid === made.uuid);
        await page.waitForSelector(`${row} .stop`, { timeout: 10000 });
        assert.equal(await cell("Persistent"), "autostart");
        await page.click(`${row} .stop`);
        await page.waitForSelector(`${row} .start`, { timeout: 10000 });
        assert.equal(await cell("State"), "inactive");
        assert.equal(service().active, false, "the service stopped it");
        await page.click(`${row} .start`);
        await page.waitForSelector(`${row} .stop`, { timeout: 10000 });
        assert.equal(service().active, true, "the service started it");
        await page.click(`${row} .autostart`);
        await page.waitForFunction(sel => document.querySelector(sel)?.textContent === "persistent", { timeout: 10000 },
                                   `${row} td[data-label="Persistent"]`);
        assert.equal(service().autostart, false, "the service turned autostart off");
    }],

    ["destroying asks for confirmation and the instance disappears", async ctx => {
        const { page, stack } = ctx;
        const victim = ctx.created[0];
        await page.click(`${ROWS}[data-uuid="${victim}"] .destroy`);
        await page.waitForSelector("#destroy-confirm");
        await shot(ctx, "07-destroy-confirm");
        await page.click("#destroy-confirm");
        await page.waitForFunction((sel) => !document.querySelector(sel), { timeout: 10000 }, `${ROWS}[data-uuid="${victim}"]`);
        assert.ok(!json(stack, ["list"]).some(i => i.uuid === victim), "the service no longer lists it");
    }],

    ["destroying an instance a domain holds is refused with the reason, and force destroys it", async ctx => {
        const { page, stack } = ctx;
        // The libvirt hook's claim (PrepareDomain), sent through the page's own bridge as root.
        const domainUuid = "6d7e2f3a-1b2c-4d5e-8f90-a1b2c3d4e5f6";
        const [paths] = await page.evaluate(uuid => window.mdevManager.service.client.call(
            "/org/mdevmanager/VGpu1/Manager", "org.mdevmanager.VGpu1.Manager", "PrepareDomain",
            ["guest1", uuid, [{ kind: cockpit.variant("s", "mdev"), profile: cockpit.variant("s", "nvidia-t4-2q") }], {}],
            { type: "ssaa{sv}a{sv}" }), domainUuid);
        assert.equal(paths.length, 1);
        const claimed = json(stack, ["list"]).find(i => i.holder === "guest1");
        assert.ok(claimed, "the service lists the claimed instance");
        const row = `${ROWS}[data-uuid="${claimed.uuid}"]`;
        await page.waitForSelector(row, { timeout: 10000 });
        assert.match(await page.$eval(row, e => e.textContent), /guest1/, "the row names the holder domain");
        await page.click(`${row} .destroy`);
        await page.click("#destroy-confirm");
        await page.waitForSelector("#destroy-force", { timeout: 10000 });
        const refusal = await page.$eval(".destroy-error", e => e.textContent);
        assert.match(refusal, /InUse/);
        assert.match(refusal, /guest1|claimed/);
        await shot(ctx, "08-destroy-needs-force");
        await page.click("#destroy-force");
        await page.waitForFunction(sel => !document.querySelector(sel), { timeout: 10000 }, row);
        assert.ok(!json(stack, ["list"]).some(i => i.uuid === claimed.uuid), "force destroyed it");
    }],

    ["a user without the polkit actions sees read-only controls with the reason", async ctx => {
        const { browser, viewerUrl, out } = ctx;
        const page = await browser.newPage();
        try {
            await page.goto(viewerUrl, { waitUntil: "domcontentloaded" });
            await page.waitForSelector(READY, { timeout: 30000 });
            const notice = await page.$eval("#read-only", e => e.textContent);
            assert.match(notice, /org\.mdevmanager\.vgpu1\.manage-instances/);
            assert.equal(await page.$eval("#create-submit", e => e.getAttribute("aria-disabled")), "true");
            const destroyButtons = await page.$$eval(".destroy, .stop, .start", els => els.map(e => [e.getAttribute("aria-disabled"), e.title]));
            assert.ok(destroyButtons.length > 1, "instances, one of them persistent, are listed for the viewer too");
            for (const [disabled, reason] of destroyButtons) {
                assert.equal(disabled, "true");
                assert.match(reason, /manage-instances/);
            }
            assert.match(await page.$eval(".autostart", e => e.getAttribute("aria-disabled") + " " + e.title), /^true .*manage-persistent/);
            // The service refuses the viewer too: the page's state is not the only guard.
            assert.equal(await page.$$eval(".sched-save", els => els.every(e => e.getAttribute("aria-disabled") === "true")), true);
            await page.screenshot({ path: join(out, "09-read-only.png"), fullPage: true });
        } finally {
            await page.close();
        }
    }],

    ["a stopped service shows how to start it, and the page comes back when it returns", async ctx => {
        const { page, stack } = ctx;
        await stack.stopService();
        await page.waitForSelector("#unreachable", { timeout: 15000 });
        const text = await page.$eval("#unreachable", e => e.textContent);
        assert.match(text, /systemctl start mdev-manager/);
        await shot(ctx, "10-service-stopped");
        await stack.startService();
        await page.waitForSelector(".mdev-parent", { timeout: 30000 });
        assert.equal(await page.evaluate(() => window.notReloaded), true, "the page was not reloaded");
    }],
];
