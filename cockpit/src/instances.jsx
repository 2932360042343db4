/*
 * Instances: a sortable, filterable table of every instance, with destroy (confirmed; the
 * force path offered only when the service refuses and says why), start/stop/autostart for
 * persistent instances, and the libvirt <hostdev> XML to copy.
 */

import React, { useCallback, useState } from "react";
import { Alert, Button, ClipboardCopy, ClipboardCopyVariant, Modal, ModalBody, ModalFooter, ModalHeader, SearchInput, Title, Toolbar, ToolbarContent, ToolbarItem } from "@patternfly/react-core";
import { Table, Tbody } from "@patternfly/react-table";
import { ACTION, IFACE, errorKind, options } from "./service.js";
import { hostdevXml } from "./hostdev.js";
import { percent } from "./format.js";

const COLUMNS = [
    ["UUID", i => i.Uuid],
    ["Kind", i => i.Kind],
    ["Parent", i => i.ParentName],
    ["Type", i => i.Type],
    ["Profile", i => i.Profile],
    ["State", i => (i.Active ? "active" : "inactive")],
    ["Persistent", i => (i.Persistent ? (i.Autostart ? "autostart" : "persistent") : "transient")],
    ["Owner", i => i.Owner || "not ours"],
    ["Holder", i => i.Holder],
    ["Weight", i => i.Weight || 0],
    ["Share", i => i.EffectiveShare || 0],
];

function DestroyDialog({ service, path, instance, onClose }) {
    const [refusal, setRefusal] = useState(null);
    const [busy, setBusy] = useState(false);
    const destroy = force => {
        setBusy(true);
        service.call(path, IFACE.instance, "Destroy", [options({ force: force || undefined })], "a{sv}")
                .then(onClose)
                .catch(error => { setBusy(false); setRefusal(error) });
    };
    // The service demands force for a claimed instance or one it did not create.
    const forceable = refusal && ["InUse", "NotSupported"].includes(errorKind(refusal));
    return (
        <Modal isOpen variant="small" onClose={onClose} aria-labelledby="destroy-title">
            <ModalHeader title={`Destroy ${instance.Uuid}?`} labelId="destroy-title" />
            <ModalBody>
                {`The ${instance.Kind} on ${instance.ParentName} (${instance.Profile || instance.Type}) is removed and forgotten.`}
                {refusal && <Alert isInline variant="danger" title={errorKind(refusal) || "Error"} className="destroy-error">{refusal.message}</Alert>}
                {forceable && <p id="destroy-force-reason">{errorKind(refusal) === "InUse"
                    ? "The service refuses because a domain holds it. Force destroys it anyway: the domain loses its device."
                    : "The service refuses because it did not create it. Force destroys it anyway."}</p>}
            </ModalBody>
            <ModalFooter>
                {forceable
                    ? <Button variant="danger" id="destroy-force" isDisabled={busy} onClick={() => destroy(true)}>Force destroy</Button>
                    : <Button variant="danger" id="destroy-confirm" isDisabled={busy || !!refusal} onClick={() => destroy(false)}>Destroy</Button>}
                <Button variant="link" onClick={onClose}>Cancel</Button>
            </ModalFooter>
        </Modal>
    );
}

function XmlDialog({ instance, onClose }) {
    return (
        <Modal isOpen variant="medium" onClose={onClose} aria-labelledby="xml-title">
            <ModalHeader title={`libvirt <hostdev> for ${instance.Uuid}`} labelId="xml-title" />
            <ModalBody>
                <ClipboardCopy isReadOnly isCode isExpanded variant={ClipboardCopyVariant.expansion} id="hostdev-xml">
                    {hostdevXml(instance)}
                </ClipboardCopy>
            </ModalBody>
        </Modal>
    );
}

/**
 * One instance's row, in plain elements with PatternFly's classes: 384 rows of Td and Button
 * components cost seconds on a loaded 2-core host; these cost a fraction. Memoized too: the
 * service model gives a changed instance a new object, so a signal about one instance
 * re-renders one row. The buttons carry the reason they are disabled in their title.
 */
const InstanceRow = React.memo(function InstanceRow({ path, instance: i, manage, persistent, act, openDialog }) {
    return (
        <tr className="pf-v6-c-table__tr" data-uuid={i.Uuid}>
            {COLUMNS.map(([label, value]) => (
                <td key={label} className="pf-v6-c-table__td" data-label={label}>{label === "Share" ? percent(i.EffectiveShare) : String(value(i))}</td>
            ))}
            <td className="pf-v6-c-table__td pf-v6-c-table__action">
                <RowButton onClick={() => openDialog({ kind: "xml", path, instance: i })}>XML</RowButton>
                {i.Persistent && (i.Active
                    ? <RowButton className="stop" denial={manage} onClick={() => act(path, "Stop", [{}], "a{sv}")}>Stop</RowButton>
                    : <RowButton className="start" denial={manage} onClick={() => act(path, "Start", [{}], "a{sv}")}>Start</RowButton>)}
                {i.Persistent &&
                    <RowButton className="autostart" denial={persistent} onClick={() => act(path, "SetAutostart", [!i.Autostart, {}], "ba{sv}")}>
                        {i.Autostart ? "No autostart" : "Autostart"}
                    </RowButton>}
                <RowButton danger className="destroy" denial={manage}
                           onClick={() => openDialog({ kind: "destroy", path, instance: i })}>Destroy</RowButton>
            </td>
        </tr>
    );
});

/**
 * A sortable column header with PatternFly's classes. Not its Th component: that measures
 * itself after every render, a forced layout of the whole table each time.
 */
function SortHeader({ label, active, direction, onSort }) {
    const arrow = active ? (direction === "asc" ? "\u25b2" : "\u25bc") : "\u21c5";
    return (
        <th className={`pf-v6-c-table__th pf-v6-c-table__sort pf-m-wrap${active ? " pf-m-selected" : ""}`}
            aria-sort={active ? (direction === "asc" ? "ascending" : "descending") : "none"} scope="col">
            <button type="button" className="pf-v6-c-table__button mdev-sort" onClick={onSort}>
                {label} <span aria-hidden="true">{arrow}</span>
            </button>
        </th>
    );
}

/** A small link button; disabled (aria, so the title still shows) with `denial` as the reason. */
function RowButton({ denial, danger, className, onClick, children }) {
    const classes = ["pf-v6-c-button", "pf-m-link", "pf-m-small", danger && "pf-m-danger", denial && "pf-m-aria-disabled", className];
    return (
        <button type="button" className={classes.filter(Boolean).join(" ")} aria-disabled={denial ? "true" : undefined}
                title={denial || undefined} data-denied={denial ? "true" : undefined}
                onClick={denial ? undefined : onClick}>
            <span className="pf-v6-c-button__text">{children}</span>
        </button>
    );
}

export function Instances({ service }) {
    const [filter, setFilter] = useState("");
    const [sortIndex, setSortIndex] = useState(2);
    const [sortDirection, setSortDirection] = useState("asc");
    const [dialog, setDialog] = useState(null);
    const [error, setError] = useState(null);

    const manage = service.denial(ACTION.manageInstances);
    const persistent = service.denial(ACTION.managePersistent);
    const needle = filter.trim().toLowerCase();
    let rows = service.all(IFACE.instance);
    if (needle)
        rows = rows.filter(([, i]) => COLUMNS.some(([, value]) => String(value(i)).toLowerCase().includes(needle)));
    const key = COLUMNS[sortIndex][1];
    rows.sort((a, b) => {
        const x = key(a[1]); const y = key(b[1]);
        const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
        return (sortDirection === "asc" ? order : -order) || a[1].Uuid.localeCompare(b[1].Uuid);
    });
    const act = useCallback((path, method, args, signature) =>
        service.call(path, IFACE.instance, method, args, signature).then(() => setError(null), setError), [service]);

    return (
        <section id="instances">
            <Title headingLevel="h2">Instances</Title>
            <Toolbar>
                <ToolbarContent>
                    <ToolbarItem>
                        <SearchInput id="instance-filter" placeholder="Filter by any column" value={filter}
                                     onChange={(_e, value) => setFilter(value)} onClear={() => setFilter("")} />
                    </ToolbarItem>
                    <ToolbarItem>{`${rows.length} instance${rows.length === 1 ? "" : "s"}`}</ToolbarItem>
                </ToolbarContent>
            </Toolbar>
            {error && <Alert isInline variant="danger" title={errorKind(error) || "Error"}>{error.message}</Alert>}
            <Table aria-label="Instances" variant="compact" id="instance-table">
                <thead className="pf-v6-c-table__thead">
                    <tr className="pf-v6-c-table__tr">
                        {COLUMNS.map(([label], index) => (
                            <SortHeader key={label} label={label} active={index === sortIndex} direction={sortDirection}
                                        onSort={() => {
                                            setSortDirection(index === sortIndex && sortDirection === "asc" ? "desc" : "asc");
                                            setSortIndex(index);
                                        }} />
                        ))}
                        <th className="pf-v6-c-table__th" aria-label="Actions" />
                    </tr>
                </thead>
                <Tbody>
                    {rows.map(([path, i]) => (
                        <InstanceRow key={path} path={path} instance={i} manage={manage} persistent={persistent}
                                     act={act} openDialog={setDialog} />
                    ))}
                </Tbody>
            </Table>
            {rows.length === 0 && <p className="mdev-empty">{needle ? "No instance matches the filter." : "No instances yet: create some from a profile below."}</p>}
            {dialog && dialog.kind === "destroy" &&
                <DestroyDialog service={service} path={dialog.path} instance={dialog.instance} onClose={() => setDialog(null)} />}
            {dialog && dialog.kind === "xml" && <XmlDialog instance={dialog.instance} onClose={() => setDialog(null)} />}
        </section>
    );
}
