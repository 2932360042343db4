/*
 * Scheduling: per GPU the policy, the backend and what it enforces, and each vGPU's weight,
 * guarantee and cap (editable), with the requested vs effective share the service reports
 * and whether the driver enforces it. The plan is drawn as one period split by effective
 * share (the service's numbers; the page computes nothing itself).
 */

import React, { useEffect, useState } from "react";
import { Alert, Button, Card, CardBody, CardTitle, FormSelect, FormSelectOption, TextInput, Title } from "@patternfly/react-core";
import { Table, Tbody } from "@patternfly/react-table";
import { ACTION, IFACE, errorKind, options } from "./service.js";
import { parsePercent, percent } from "./format.js";

const POLICIES = ["best-effort", "equal-share", "fixed-share", "weighted"];
const COLORS = ["#0066cc", "#3e8635", "#f0ab00", "#c9190b", "#5752d1", "#009596", "#ec7a08", "#6a6e73"];

/** One period as a bar: each instance's effective share, then the idle rest. */
function PlanPicture({ parent, instances }) {
    const width = 600;
    let x = 0;
    const period = parent.PeriodUs || 0;
    const parts = instances.filter(i => i.EffectiveShare > 0).map((i, index) => {
        const w = (width * i.EffectiveShare) / 1000000;
        const part = (
            <g key={i.Uuid}>
                <rect x={x} y={0} width={w} height={28} fill={COLORS[index % COLORS.length]}>
                    <title>{`${i.Uuid}: ${percent(i.EffectiveShare)}`}</title>
                </rect>
                {w > 40 && <text x={x + 4} y={18} fontSize="11" fill="#fff">{`${i.Uuid.substring(0, 8)} ${percent(i.EffectiveShare)}`}</text>}
            </g>
        );
        x += w;
        return part;
    });
    return (
        <svg className="mdev-plan" width={width} height={44} viewBox={`0 0 ${width} 44`} role="img"
             aria-label={`plan of one period on ${parent.Name}`}>
            <rect x={0} y={0} width={width} height={28} fill="#f0f0f0" />
            {parts}
            <text x={0} y={42} fontSize="10">0</text>
            <text x={width} y={42} fontSize="10" textAnchor="end">{period ? `${period / 1000} ms` : "one period"}</text>
        </svg>
    );
}

/**
 * A label in PatternFly's look. Not its Label component: that measures its text in a layout
 * effect (a forced reflow per label), about 20 ms each on a page with hundreds of rows.
 */
function Tag({ color, children }) {
    return (
        <span className={`pf-v6-c-label pf-m-compact pf-m-${color}`}>
            <span className="pf-v6-c-label__content"><span className="pf-v6-c-label__text">{children}</span></span>
        </span>
    );
}

/** One vGPU's settings; plain cells (PatternFly's Td measures itself after every render). */
const ScheduleRow = React.memo(function ScheduleRow({ service, path, instance, denial, onError }) {
    const [weight, setWeight] = useState(String(instance.Weight || 100));
    const [min, setMin] = useState(instance.MinShare ? String(instance.MinShare / 10000) : "");
    const [max, setMax] = useState(instance.MaxShare ? String(instance.MaxShare / 10000) : "");
    // A change published by the service (another client, vgpuctl) replaces what is shown.
    useEffect(() => { setWeight(String(instance.Weight || 100)) }, [instance.Weight]);
    useEffect(() => { setMin(instance.MinShare ? String(instance.MinShare / 10000) : "") }, [instance.MinShare]);
    useEffect(() => { setMax(instance.MaxShare ? String(instance.MaxShare / 10000) : "") }, [instance.MaxShare]);
    const save = () => {
        const minPpm = parsePercent(min);
        const maxPpm = parsePercent(max);
        const weightValue = Number(weight);
        if (!Number.isInteger(weightValue) || Number.isNaN(minPpm) || Number.isNaN(maxPpm)) {
            onError({ name: "InvalidArgs", message: `weight must be a whole number and shares 0-100% (instance ${instance.Uuid})` });
            return;
        }
        service.call(path, IFACE.instance, "SetSchedule", [weightValue, minPpm, maxPpm, options({})], "uuua{sv}")
                .then(() => onError(null), onError);
    };
    return (
        <tr className="pf-v6-c-table__tr" data-uuid={instance.Uuid}>
            <td className="pf-v6-c-table__td" data-label="UUID">{instance.Uuid}</td>
            <td className="pf-v6-c-table__td" data-label="Weight"><TextInput aria-label="weight" className="sched-weight" type="number" value={weight} onChange={(_e, v) => setWeight(v)} isDisabled={!!denial} /></td>
            <td className="pf-v6-c-table__td" data-label="Guarantee %"><TextInput aria-label="guarantee" className="sched-min" value={min} placeholder="none" onChange={(_e, v) => setMin(v)} isDisabled={!!denial} /></td>
            <td className="pf-v6-c-table__td" data-label="Cap %"><TextInput aria-label="cap" className="sched-max" value={max} placeholder="none" onChange={(_e, v) => setMax(v)} isDisabled={!!denial} /></td>
            <td className="pf-v6-c-table__td sched-requested" data-label="Requested">{percent(instance.RequestedShare, "0%")}</td>
            <td className="pf-v6-c-table__td sched-effective" data-label="Effective">{percent(instance.EffectiveShare, "0%")}</td>
            <td className="pf-v6-c-table__td" data-label="Enforced">{instance.Enforced ? <Tag color="green">enforced</Tag> : <Tag color="orange">{instance.SchedulingNote || "not enforced"}</Tag>}</td>
            <td className="pf-v6-c-table__td pf-v6-c-table__action">
                <Button variant="secondary" size="sm" className="sched-save" isAriaDisabled={!!denial} title={denial || undefined} onClick={save}>Apply</Button>
            </td>
        </tr>
    );
});

function ParentSchedule({ service, path, parent }) {
    const [error, setError] = useState(null);
    const denial = service.denial(ACTION.setWeights);
    const instances = service.all(IFACE.instance).map(([p, i]) => [p, i]).filter(([, i]) => i.ParentName === parent.Name)
            .sort((a, b) => a[1].Uuid.localeCompare(b[1].Uuid));
    const setPolicy = policy =>
        service.call(path, IFACE.parent, "SetSchedulerPolicy", [policy, options({})], "sa{sv}").then(() => setError(null), setError);
    return (
        <Card className="mdev-schedule" data-parent={parent.Name} isCompact>
            <CardTitle>{`${parent.Name}: ${parent.SchedulerBackend || "no"} scheduler`}</CardTitle>
            <CardBody>
                <div className="sched-policy-line">
                    <span>Policy</span>
                    <div className="sched-policy-select">
                        <FormSelect className="sched-policy" aria-label={`policy of ${parent.Name}`} value={parent.Policy}
                                    onChange={(_e, v) => setPolicy(v)} isDisabled={!!denial} title={denial || undefined}>
                            {POLICIES.map(p => <FormSelectOption key={p} value={p} label={p} />)}
                        </FormSelect>
                    </div>
                    <span>{`the driver enforces: ${(parent.SchedulerCapabilities || []).join(", ") || "nothing"}`}</span>
                </div>
                {parent.SchedulerNote && <p className="sched-note">{parent.SchedulerNote}</p>}
                {error && <Alert isInline variant="danger" title={errorKind(error) || "Error"} className="sched-error">{error.message}</Alert>}
                {instances.length > 0 && <PlanPicture parent={parent} instances={instances.map(([, i]) => i)} />}
                {instances.length > 0 &&
                    <Table aria-label={`scheduling on ${parent.Name}`} variant="compact">
                        <thead className="pf-v6-c-table__thead">
                            <tr className="pf-v6-c-table__tr">
                                {["UUID", "Weight", "Guarantee %", "Cap %", "Requested", "Effective", "Driver"].map(h => <th key={h} className="pf-v6-c-table__th pf-m-wrap" scope="col">{h}</th>)}
                                <th className="pf-v6-c-table__th" aria-label="Apply" />
                            </tr>
                        </thead>
                        <Tbody>
                            {instances.map(([p, i]) => <ScheduleRow key={p} service={service} path={p} instance={i} denial={denial} onError={setError} />)}
                        </Tbody>
                    </Table>}
            </CardBody>
        </Card>
    );
}

/** One GPU at a time (a host may have hundreds of vGPUs): the first with instances unless chosen. */
export function Scheduling({ service }) {
    const [chosen, setChosen] = useState("");
    const parents = service.all(IFACE.parent).filter(([, p]) => (p.Instances || []).length > 0)
            .sort((a, b) => a[1].Name.localeCompare(b[1].Name));
    const shown = parents.find(([, p]) => p.Name === chosen) || parents[0];
    return (
        <section id="scheduling">
            <Title headingLevel="h2">Scheduling</Title>
            {parents.length === 0 && <p className="mdev-empty">No GPU has vGPUs yet.</p>}
            {parents.length > 1 &&
                <div className="sched-parent-select">
                    <FormSelect id="sched-parent" aria-label="GPU" value={shown[1].Name} onChange={(_e, v) => setChosen(v)}>
                        {parents.map(([, p]) => <FormSelectOption key={p.Name} value={p.Name} label={`${p.Name} (${p.Instances.length} vGPUs)`} />)}
                    </FormSelect>
                </div>}
            {shown && <ParentSchedule key={shown[0]} service={service} path={shown[0]} parent={shown[1]} />}
        </section>
    );
}
