/*
 * The page's model of the service: everything the ObjectManager at /org/mdevmanager/VGpu1
 * publishes, kept current from the service's own signals (InterfacesAdded/Removed,
 * PropertiesChanged, Manager.JobRemoved) - never by polling.
 *
 * Contract: subscribe first, then GetManagedObjects; the reply replaces the store (the bus
 * delivers in order, so a signal received before the reply is already in it). When the
 * service's name loses its owner the store is emptied and `state` becomes "unreachable";
 * when an owner appears again the store is loaded afresh.
 */

/* global cockpit */

export const BUS_NAME = "org.mdevmanager.VGpu1";
export const ROOT = "/org/mdevmanager/VGpu1";
export const IFACE = {
    manager: "org.mdevmanager.VGpu1.Manager",
    parent: "org.mdevmanager.VGpu1.Parent",
    sriov: "org.mdevmanager.VGpu1.Sriov",
    type: "org.mdevmanager.VGpu1.MdevType",
    instance: "org.mdevmanager.VGpu1.Instance",
    profile: "org.mdevmanager.VGpu1.Profile",
    job: "org.mdevmanager.VGpu1.Job",
};
export const MANAGER_PATH = ROOT + "/Manager";

/** The polkit actions the page's controls need (docs/dbus-api.md, Authorization). */
export const ACTION = {
    manageInstances: "org.mdevmanager.vgpu1.manage-instances",
    managePersistent: "org.mdevmanager.vgpu1.manage-persistent",
    setWeights: "org.mdevmanager.vgpu1.set-weights",
};

/** Strips the {t, v} wrapping cockpit gives variants. */
function unwrap(props) {
    const out = {};
    for (const key in props) {
        const value = props[key];
        out[key] = (value && typeof value === "object" && "v" in value && "t" in value) ? value.v : value;
    }
    return out;
}

/** Short error kind of a D-Bus error name: "org.mdevmanager.VGpu1.Error.NoCapacity" -> "NoCapacity". */
export function errorKind(error) {
    const name = (error && error.name) || "";
    return name.substring(name.lastIndexOf(".") + 1);
}

export class Service {
    constructor() {
        this.objects = new Map(); // path -> { iface -> props }
        this.permissions = {};
        this.state = "connecting"; // connecting | ready | unreachable
        this.problem = "";
        this.recentJobs = []; // { path, result, message } from Manager.JobRemoved, newest first
        this.version = 0;
        this.listeners = new Set();
        this.loadSerial = 0;
        this.changeScheduled = false;
        // The bus itself tells when the service's name gets an owner (no polling): then the
        // page connects afresh, so subscriptions follow the new owner.
        this.bus = cockpit.dbus("org.freedesktop.DBus", { bus: "system" });
        this.bus.subscribe({ interface: "org.freedesktop.DBus", member: "NameOwnerChanged", arg0: BUS_NAME },
                           (_path, _iface, _signal, [, , owner]) => {
                               if (owner)
                                   this.connect();
                               else
                                   this.unreachable(`the service ${BUS_NAME} stopped`);
                           });
        this.connect();
    }

    /** A new connection to the service: subscribe, then load everything. */
    connect() {
        this.disconnect();
        const client = cockpit.dbus(BUS_NAME, { bus: "system", superuser: "try" });
        this.client = client;
        client.addEventListener("close", (_event, options) => {
            if (this.client !== client)
                return;
            this.client = null;
            const problem = options.problem === "not-found" ? `the service ${BUS_NAME} is not running on the system bus` : cockpit.message(options);
            this.unreachable(problem || "the D-Bus connection closed");
        });
        this.subscribe(client);
        this.load();
    }

    disconnect() {
        const client = this.client;
        this.client = null;
        if (client)
            client.close();
    }

    /** Calls `listener` (coalesced to one call per frame) after every change. */
    onChange(listener) {
        this.listeners.add(listener);
        return () => this.listeners.delete(listener);
    }

    changed() {
        this.version += 1;
        if (this.changeScheduled)
            return;
        this.changeScheduled = true;
        window.requestAnimationFrame(() => {
            this.changeScheduled = false;
            for (const listener of this.listeners)
                listener(this.version);
        });
    }

    unreachable(problem) {
        this.disconnect();
        this.loadSerial += 1; // a load still in flight must not bring the old tree back
        this.objects = new Map();
        this.permissions = {};
        this.state = "unreachable";
        this.problem = problem;
        this.changed();
    }

    subscribe(c) {
        c.subscribe({ interface: "org.freedesktop.DBus.ObjectManager", path: ROOT, member: "InterfacesAdded" },
                    (_path, _iface, _signal, [path, interfaces]) => {
                        window.mdevManager.lastAdded = { path, at: Date.now() }; // for the benchmark
                        const entry = { ...this.objects.get(path) };
                        for (const iface in interfaces)
                            entry[iface] = unwrap(interfaces[iface]);
                        this.objects.set(path, entry);
                        this.changed();
                    });
        c.subscribe({ interface: "org.freedesktop.DBus.ObjectManager", path: ROOT, member: "InterfacesRemoved" },
                    (_path, _iface, _signal, [path, interfaces]) => {
                        if (!this.objects.has(path))
                            return;
                        const entry = { ...this.objects.get(path) };
                        this.objects.set(path, entry);
                        for (const iface of interfaces)
                            delete entry[iface];
                        if (Object.keys(entry).length === 0)
                            this.objects.delete(path);
                        this.changed();
                    });
        c.subscribe({ interface: "org.freedesktop.DBus.Properties", path_namespace: ROOT, member: "PropertiesChanged" },
                    (path, _iface, _signal, [iface, changedProps]) => {
                        const entry = this.objects.get(path);
                        if (!entry || !entry[iface])
                            return;
                        // A new object per change: unchanged objects keep their identity, so the
                        // page re-renders only the rows that changed (React.memo).
                        entry[iface] = { ...entry[iface], ...unwrap(changedProps) };
                        this.changed();
                    });
        c.subscribe({ interface: IFACE.manager, path: MANAGER_PATH, member: "JobRemoved" },
                    (_path, _iface, _signal, [job, result, message]) => {
                        this.recentJobs = [{ path: job, result, message }, ...this.recentJobs].slice(0, 10);
                        this.changed();
                    });
    }

    async load() {
        if (!this.client) {
            this.connect();
            return;
        }
        const serial = ++this.loadSerial;
        try {
            // Both at once: the permissions are a polkit round trip per action in the service.
            const [[objects], [permissions]] = await Promise.all([
                this.client.call(ROOT, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", [], { type: "" }),
                this.client.call(MANAGER_PATH, IFACE.manager, "GetPermissions", [], { type: "" }),
            ]);
            if (serial !== this.loadSerial)
                return;
            window.mdevManager.loadedAt = performance.now();
            const store = new Map();
            for (const path in objects) {
                const entry = {};
                for (const iface in objects[path])
                    entry[iface] = unwrap(objects[path][iface]);
                store.set(path, entry);
            }
            this.objects = store;
            this.permissions = permissions;
            this.state = "ready";
            this.problem = "";
            this.changed();
        } catch (error) {
            if (serial === this.loadSerial)
                this.unreachable(error.message || String(error));
        }
    }

    /** The objects carrying `iface`, as [path, props] pairs. */
    all(iface) {
        const out = [];
        for (const [path, entry] of this.objects) {
            if (entry[iface])
                out.push([path, entry[iface]]);
        }
        return out;
    }

    get(path, iface) {
        const entry = this.objects.get(path);
        return entry ? entry[iface] : undefined;
    }

    /** Whether the caller holds `action` without having to authenticate. */
    allowed(action) {
        return this.permissions[action] === "yes";
    }

    /** Why a control needing `action` is disabled, or "" when it is not. */
    denial(action) {
        if (this.allowed(action))
            return "";
        const answer = this.permissions[action] || "unknown";
        return `Read-only: ${action} is "${answer}" for you; turn on administrative access.`;
    }

    call(path, iface, method, args, signature) {
        if (!this.client)
            return Promise.reject(new Error(`not connected to ${BUS_NAME}`));
        return this.client.call(path, iface, method, args, { type: signature });
    }
}

/** An a{sv} options dict from plain values (string, boolean, unsigned integer by type). */
export function options(values) {
    const out = {};
    for (const key in values) {
        const value = values[key];
        if (value === undefined || value === null || value === "")
            continue;
        if (typeof value === "boolean")
            out[key] = cockpit.variant("b", value);
        else if (typeof value === "number")
            out[key] = cockpit.variant("u", value);
        else
            out[key] = cockpit.variant("s", String(value));
    }
    return out;
}
