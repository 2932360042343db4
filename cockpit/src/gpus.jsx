/* GPUs: each parent with its vendor, driver, modes, NUMA node, SR-IOV VFs, and a capacity bar per type. */

import React from "react";
import { Card, CardBody, CardTitle, DescriptionList, DescriptionListDescription, DescriptionListGroup, DescriptionListTerm, Gallery, Progress, ProgressMeasureLocation, Title } from "@patternfly/react-core";
import { IFACE } from "./service.js";
import { vendorName } from "./format.js";

function Field({ term, children }) {
    return (
        <DescriptionListGroup>
            <DescriptionListTerm>{term}</DescriptionListTerm>
            <DescriptionListDescription>{children}</DescriptionListDescription>
        </DescriptionListGroup>
    );
}

function TypeCapacity({ type }) {
    const used = (type.Instances || []).length;
    const total = used + type.AvailableInstances;
    return (
        <div className="mdev-type" data-type={type.Id} data-parent={type.ParentName}>
            <Progress value={total ? (100 * used) / total : 0}
                      title={`${type.Name || type.Id} (${type.Id})`}
                      label={`${used} used, ${type.AvailableInstances} available`}
                      measureLocation={ProgressMeasureLocation.outside}
                      aria-label={`capacity of ${type.Id} on ${type.ParentName}`} />
        </div>
    );
}

/** Props equal when each is identical, arrays element by element (a new list of the same objects). */
function sameProps(a, b) {
    return Object.keys(a).every(k => a[k] === b[k] ||
        (Array.isArray(a[k]) && Array.isArray(b[k]) && a[k].length === b[k].length && a[k].every((x, i) => x === b[k][i])));
}

/** One GPU's card; re-rendered only when its parent, SR-IOV or type objects change. */
const ParentCard = React.memo(function ParentCard({ parent, sriov, types }) {
    return (
        <Card className="mdev-parent" data-parent={parent.Name} isCompact>
            <CardTitle>{parent.Name}</CardTitle>
            <CardBody>
                <DescriptionList isCompact isHorizontal>
                    <Field term="Vendor">{vendorName(parent.VendorId, parent.DeviceId)}</Field>
                    <Field term="Driver">{parent.Driver || "none"}</Field>
                    <Field term="Mode">{(parent.Modes || []).join(", ") || "none"}</Field>
                    <Field term="NUMA node">{parent.NumaNode >= 0 ? parent.NumaNode : "unknown"}</Field>
                    {sriov && <Field term="SR-IOV VFs">{`${sriov.NumVfs} of ${sriov.TotalVfs} enabled`}</Field>}
                    <Field term="Instances">{(parent.Instances || []).length}</Field>
                </DescriptionList>
                {types.map(t => <TypeCapacity key={t.Id} type={t} />)}
            </CardBody>
        </Card>
    );
}, sameProps);

export function Gpus({ service }) {
    const parents = service.all(IFACE.parent).sort((a, b) => a[1].Name.localeCompare(b[1].Name));
    const types = service.all(IFACE.type).map(([, t]) => t);
    return (
        <section id="gpus">
            <Title headingLevel="h2">GPUs</Title>
            <Gallery hasGutter minWidths={{ default: "340px" }}>
                {parents.map(([path, parent]) => (
                    <ParentCard key={path} parent={parent} sriov={service.get(path, IFACE.sriov)}
                                types={types.filter(t => t.ParentName === parent.Name).sort((a, b) => a.Id.localeCompare(b.Id))} />
                ))}
            </Gallery>
        </section>
    );
}
