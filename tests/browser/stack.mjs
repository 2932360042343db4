// The real stack the browser tests, `scripts/demo --web` and the page benchmark run against:
// a private system-like bus (Debian's system.conf made private, as tests/src/bus.rs does),
// polkitd on it, the mdev-manager daemon on the simulated host, the built Cockpit package,
// and cockpit-ws with a local session (cockpit-bridge inherits the private bus address).
// Every process started here is stopped by `stack.stop()`; nothing is killed by name.

import puppeteer from "puppeteer-core";
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const BUS_NAME = "org.mdevmanager.VGpu1";
const POLKIT_ACTIONS_FILE = "/usr/share/polkit-1/actions/org.mdevmanager.vgpu1.policy";
const COCKPIT_WS = "/usr/lib/cockpit/cockpit-ws";

const sleep = ms => new Promise(done => setTimeout(done, ms));

/** Polls `ready` every 50 ms until it holds; throws `what` after `seconds`. */
export async function waitFor(what, seconds, ready) {
    const deadline = Date.now() + seconds * 1000;
    while (Date.now() < deadline) {
        if (await ready())
            return;
        await sleep(50);
    }
    throw new Error(`${what} (waited ${seconds} s)`);
}

/** Debian's system bus configuration with our socket, no user switch/fork/syslog/activation, and `policyDir`. */
export function privateBusConfig(systemConf, socket, policyDir) {
    const out = [];
    for (const line of systemConf.split("\n")) {
        const t = line.trim();
        if (["<user>", "<pidfile>", "<fork/>", "<syslog/>", "<standard_system_servicedirs/>", "<servicehelper>"].some(tag => t.startsWith(tag)) ||
            (t.startsWith("<include") && t.includes("/etc/dbus-1/")))
            continue;
        if (t.startsWith("<listen>"))
            out.push(`  <listen>unix:path=${socket}</listen>`);
        else if (t === "<includedir>system.d</includedir>")
            out.push("  <includedir>/usr/share/dbus-1/system.d</includedir>", `  <includedir>${policyDir}</includedir>`);
        else
            out.push(line);
    }
    return out.join("\n");
}

function nameHasOwner(address, name) {
    const r = spawnSync("dbus-send", [`--bus=${address}`, "--print-reply", "--dest=org.freedesktop.DBus",
        "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", `string:${name}`], { encoding: "utf8" });
    return r.status === 0 && r.stdout.includes("boolean true");
}

function portOpen(port) {
    return new Promise(done => {
        const socket = net.connect(port, "127.0.0.1");
        socket.once("connect", () => { socket.destroy(); done(true) });
        socket.once("error", () => done(false));
    });
}

/** A free TCP port on 127.0.0.1. */
export function freePort() {
    return new Promise((done, fail) => {
        const server = net.createServer();
        server.once("error", fail);
        server.listen(0, "127.0.0.1", () => {
            const { port } = server.address();
            server.close(() => done(port));
        });
    });
}

/** Debian's Chromium, headless, driven over the DevTools protocol (CHROMIUM for another binary). */
export function launchChromium() {
    return puppeteer.launch({
        executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
        headless: true,
        args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"],
        defaultViewport: { width: 1400, height: 1000 },
    });
}

export class Stack {
    constructor({ log = "warn" } = {}) {
        this.dir = mkdtempSync("/tmp/mdev-cockpit-");
        chmodSync(this.dir, 0o755); // the unprivileged test user reaches the bus and the package
        this.processes = [];
        this.cleanups = [];
        this.log = log;
        this.bin = process.env.MDEV_BIN_DIR || join(REPO, "target/debug");
        this.dataHome = join(this.dir, "data");
    }

    get address() {
        return `unix:path=${join(this.dir, "bus")}`;
    }

    track(child, name) {
        child.on("exit", () => { child.exited = true });
        this.processes.push({ child, name });
        return child;
    }

    async startBus() {
        const policyDir = join(this.dir, "policy");
        mkdirSync(policyDir);
        copyFileSync(join(REPO, "packaging/dbus/org.mdevmanager.VGpu1.conf"), join(policyDir, "org.mdevmanager.VGpu1.conf"));
        const config = join(this.dir, "system.conf");
        writeFileSync(config, privateBusConfig(readFileSync("/usr/share/dbus-1/system.conf", "utf8"), join(this.dir, "bus"), policyDir));
        const r = spawnSync("dbus-daemon", [`--config-file=${config}`, "--fork", "--print-pid"], { encoding: "utf8" });
        if (r.status !== 0)
            throw new Error(`dbus-daemon failed: ${r.stderr}`);
        const pid = Number(r.stdout.trim());
        this.cleanups.push(() => { try { process.kill(pid, "SIGTERM") } catch { /* already gone */ } });
        await waitFor("the private bus socket did not appear", 10, () => existsSync(join(this.dir, "bus")));
    }

    /** polkitd on the bus, with the project's actions installed (removed again if we installed them). */
    async startPolkitd() {
        if (!existsSync(POLKIT_ACTIONS_FILE)) {
            copyFileSync(join(REPO, "packaging/polkit/org.mdevmanager.vgpu1.policy"), POLKIT_ACTIONS_FILE);
            this.cleanups.push(() => rmSync(POLKIT_ACTIONS_FILE, { force: true }));
        }
        this.track(spawn("/usr/lib/polkit-1/polkitd", ["--no-debug"], {
            env: { ...process.env, DBUS_SYSTEM_BUS_ADDRESS: this.address }, stdio: "ignore",
        }), "polkitd");
        await waitFor("polkitd did not take org.freedesktop.PolicyKit1", 15,
                      () => nameHasOwner(this.address, "org.freedesktop.PolicyKit1"));
    }

    /** The daemon on the simulated host `topology`; resolves once it owns its name. */
    async startService(topology = "default", extra = []) {
        const state = join(this.dir, "state");
        mkdirSync(state, { recursive: true });
        const child = this.track(spawn(join(this.bin, "mdev-manager"), ["--simulate", topology, "--state-dir", state, ...extra], {
            env: { ...process.env, DBUS_SYSTEM_BUS_ADDRESS: this.address, MDEV_MANAGER_LOG: this.log },
            stdio: ["ignore", "ignore", "inherit"],
        }), "mdev-manager");
        this.service = child;
        await waitFor("mdev-manager did not take its bus name", 60, () => {
            if (child.exited)
                throw new Error("mdev-manager exited at start");
            return nameHasOwner(this.address, BUS_NAME);
        });
        return child;
    }

    /** Stops the daemon (SIGTERM) and waits until its name is released. */
    async stopService() {
        const child = this.service;
        this.service = null;
        if (!child || child.exited)
            return;
        child.kill("SIGTERM");
        await waitFor("mdev-manager did not exit on SIGTERM", 15, () => child.exited);
    }

    /** Copies the built page (cockpit/dist) to where cockpit-bridge finds it for XDG_DATA_HOME. */
    installPage(dist = join(REPO, "cockpit/dist")) {
        if (!existsSync(join(dist, "index.js")))
            throw new Error(`${dist} has no built page: run (cd cockpit && npm ci && npm run build)`);
        const target = join(this.dataHome, "cockpit/mdev-manager");
        mkdirSync(dirname(target), { recursive: true });
        cpSync(dist, target, { recursive: true });
        spawnSync("chmod", ["-R", "a+rX", this.dataHome]);
    }

    /**
     * cockpit-ws without TLS on 127.0.0.1:`port` with a local session: its cockpit-bridge runs
     * as the user cockpit-ws runs as (`user`, or root) and talks to our bus as the system bus.
     */
    async startCockpitWs(port, user = null) {
        const home = join(this.dir, `home-${user || "root"}`);
        mkdirSync(home, { recursive: true });
        const env = {
            PATH: "/usr/sbin:/usr/bin:/sbin:/bin", HOME: home, XDG_DATA_HOME: this.dataHome,
            XDG_RUNTIME_DIR: home, DBUS_SYSTEM_BUS_ADDRESS: this.address, LANG: "C.UTF-8",
            // Without a session bus address cockpit-bridge launches a session dbus-daemon that
            // outlives it; the page needs none, so point it at a socket that does not exist.
            DBUS_SESSION_BUS_ADDRESS: `unix:path=${join(this.dir, "no-session-bus")}`,
            // Likewise an ssh-agent, which it starts when none is set.
            SSH_AUTH_SOCK: join(this.dir, "no-ssh-agent"),
        };
        const args = [COCKPIT_WS, "--no-tls", "--local-session=/usr/bin/cockpit-bridge", "--port", String(port), "--address", "127.0.0.1"];
        let child;
        if (user) {
            spawnSync("chown", [user, home]);
            chmodSync(home, 0o700);
            child = spawn("runuser", ["-u", user, "--", "env", ...Object.entries(env).map(([k, v]) => `${k}=${v}`), ...args], { stdio: ["ignore", "ignore", "inherit"] });
        } else {
            child = spawn(args[0], args.slice(1), { env, stdio: ["ignore", "ignore", "inherit"] });
        }
        this.track(child, `cockpit-ws :${port}`);
        await waitFor(`cockpit-ws did not listen on ${port}`, 15, () => {
            if (child.exited)
                throw new Error(`cockpit-ws on ${port} exited at start`);
            return portOpen(port);
        });
        return `http://127.0.0.1:${port}/cockpit/@localhost/mdev-manager/index.html`;
    }

    /** A system user without any grant (no home, no shell), removed by stop(). */
    createUser(name) {
        spawnSync("userdel", [name]);
        const r = spawnSync("useradd", ["-M", "-s", "/usr/sbin/nologin", name], { encoding: "utf8" });
        if (r.status !== 0)
            throw new Error(`useradd ${name}: ${r.stderr}`);
        this.cleanups.push(() => spawnSync("userdel", [name]));
        return name;
    }

    /** `vgpuctl ARGS` against the stack's bus; returns { status, stdout, stderr }. */
    vgpuctl(args) {
        return spawnSync(join(this.bin, "vgpuctl"), args, {
            env: { ...process.env, DBUS_SYSTEM_BUS_ADDRESS: this.address }, encoding: "utf8",
        });
    }

    /**
     * Helpers a cockpit-bridge may have left running (they detach from it): found by our run
     * directory in their environment, so nothing outside this stack is touched.
     */
    stopStrays() {
        const marker = `XDG_DATA_HOME=${this.dataHome}`;
        for (const entry of readdirSync("/proc")) {
            if (!/^\d+$/.test(entry) || Number(entry) === process.pid)
                continue;
            let environment;
            try {
                environment = readFileSync(`/proc/${entry}/environ`, "utf8");
            } catch {
                continue; // gone already, or not ours to read
            }
            if (environment.split("\0").includes(marker)) {
                try { process.kill(Number(entry), "SIGTERM") } catch { /* exited meanwhile */ }
            }
        }
    }

    async stop() {
        for (const { child } of this.processes.reverse()) {
            if (!child.exited)
                child.kill("SIGTERM");
        }
        await waitFor("processes of the stack did not stop", 10, () => this.processes.every(p => p.child.exited)).catch(() => {
            for (const { child } of this.processes)
                if (!child.exited)
                    child.kill("SIGKILL");
        });
        this.stopStrays();
        for (const cleanup of this.cleanups.reverse())
            cleanup();
        rmSync(this.dir, { recursive: true, force: true });
    }
}
