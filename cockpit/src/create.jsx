/*
 * Create: instances from a profile (the catalog with its descriptions), count, a parent or
 * placement (pack/spread, NUMA node), autostart, weight. With "wait for parent" the request
 * is a Job (StartCreateInstances) that the Jobs section can cancel. A refusal shows the
 * service's own message, which names the numbers.
 */

import React, { useState } from "react";
import { ActionGroup, Alert, Checkbox, Form, FormGroup, FormHelperText, FormSelect, FormSelectOption, Grid, GridItem, HelperText, HelperTextItem, TextInput, Title } from "@patternfly/react-core";
import { ACTION, IFACE, MANAGER_PATH, errorKind, options } from "./service.js";
import { GuardedButton } from "./permission.jsx";

export function Create({ service }) {
    const [profile, setProfile] = useState("");
    const [count, setCount] = useState("1");
    const [parent, setParent] = useState("");
    const [placement, setPlacement] = useState("");
    const [numaNode, setNumaNode] = useState("");
    const [autostart, setAutostart] = useState(false);
    const [weight, setWeight] = useState("");
    const [waitForParent, setWaitForParent] = useState("");
    const [result, setResult] = useState(null);
    const [busy, setBusy] = useState(false);
    const [attempt, setAttempt] = useState(0);

    const profiles = service.all(IFACE.profile).map(([, p]) => p).sort((a, b) => a.Name.localeCompare(b.Name));
    const parents = service.all(IFACE.parent).map(([, p]) => p.Name).sort();
    const chosen = profiles.find(p => p.Name === profile);
    const denial = service.denial(ACTION.manageInstances) || (autostart ? service.denial(ACTION.managePersistent) : "");

    const submit = event => {
        event.preventDefault();
        const values = {
            count: Number(count),
            parent,
            placement,
            "numa-node": numaNode === "" ? undefined : Number(numaNode),
            autostart: autostart || undefined,
            weight: weight === "" ? undefined : Number(weight),
        };
        const asJob = waitForParent !== "";
        if (asJob)
            values["wait-for-parent"] = Number(waitForParent);
        setBusy(true);
        setResult(null);
        const thisAttempt = attempt + 1;
        setAttempt(thisAttempt);
        service.call(MANAGER_PATH, IFACE.manager, asJob ? "StartCreateInstances" : "CreateInstances",
                     [profile, options(values)], "sa{sv}")
                .then(([created]) => setResult({ attempt: thisAttempt, ok: true, text: asJob ? `Started job ${created}` : `Created ${created.length} instance${created.length === 1 ? "" : "s"} from ${profile}` }))
                .catch(error => setResult({ attempt: thisAttempt, ok: false, kind: errorKind(error), text: error.message }))
                .finally(() => setBusy(false));
    };

    return (
        <section id="create">
            <Title headingLevel="h2">Create</Title>
            <Form onSubmit={submit} id="create-form" data-attempt={attempt}>
                <Grid hasGutter md={4}>
                    <GridItem>
                        <FormGroup label="Profile" fieldId="create-profile" isRequired>
                            <FormSelect id="create-profile" value={profile} onChange={(_e, v) => setProfile(v)}>
                                <FormSelectOption value="" label="Choose a profile" isPlaceholder />
                                {profiles.map(p => <FormSelectOption key={p.Name} value={p.Name} label={p.Name} />)}
                            </FormSelect>
                            <FormHelperText><HelperText><HelperTextItem id="create-profile-description">{chosen ? chosen.Description : "The catalog: built-in profiles and /etc/mdev-manager/profiles.d"}</HelperTextItem></HelperText></FormHelperText>
                        </FormGroup>
                    </GridItem>
                    <GridItem>
                        <FormGroup label="Count" fieldId="create-count">
                            <TextInput id="create-count" type="number" min={1} max={256} value={count} onChange={(_e, v) => setCount(v)} />
                        </FormGroup>
                    </GridItem>
                    <GridItem>
                        <FormGroup label="Parent" fieldId="create-parent">
                            <TextInput id="create-parent" list="create-parent-names" value={parent} placeholder="any: placement decides"
                                       onChange={(_e, v) => setParent(v)} />
                            <datalist id="create-parent-names">{parents.map(name => <option key={name} value={name} />)}</datalist>
                        </FormGroup>
                    </GridItem>
                    <GridItem>
                        <FormGroup label="Placement" fieldId="create-placement">
                            <FormSelect id="create-placement" value={placement} onChange={(_e, v) => setPlacement(v)}>
                                <FormSelectOption value="" label="service default" />
                                <FormSelectOption value="pack" label="pack: fill the busiest GPU that fits" />
                                <FormSelectOption value="spread" label="spread: the idlest GPU" />
                            </FormSelect>
                        </FormGroup>
                    </GridItem>
                    <GridItem>
                        <FormGroup label="NUMA node" fieldId="create-numa">
                            <TextInput id="create-numa" type="number" min={0} value={numaNode} placeholder="any" onChange={(_e, v) => setNumaNode(v)} />
                        </FormGroup>
                    </GridItem>
                    <GridItem>
                        <FormGroup label="Weight" fieldId="create-weight">
                            <TextInput id="create-weight" type="number" min={1} max={10000} value={weight} placeholder="profile's (100)" onChange={(_e, v) => setWeight(v)} />
                        </FormGroup>
                    </GridItem>
                    <GridItem>
                        <FormGroup label="Wait for parent (seconds)" fieldId="create-wait">
                            <TextInput id="create-wait" type="number" min={1} max={3600} value={waitForParent} placeholder="no: fail at once" onChange={(_e, v) => setWaitForParent(v)} />
                        </FormGroup>
                    </GridItem>
                    <GridItem>
                        <FormGroup fieldId="create-autostart" label="Persistence">
                            <Checkbox id="create-autostart" label="Autostart (persistent)" isChecked={autostart} onChange={(_e, v) => setAutostart(v)} />
                        </FormGroup>
                    </GridItem>
                </Grid>
                <ActionGroup>
                    <GuardedButton type="submit" id="create-submit" denial={denial} isDisabled={!profile || busy}>Create</GuardedButton>
                </ActionGroup>
            </Form>
            {result && (result.ok
                ? <Alert isInline variant="success" title={result.text} id="create-result" data-attempt={result.attempt} />
                : <Alert isInline variant="danger" title={result.kind || "Error"} id="create-error" data-attempt={result.attempt}>{result.text}</Alert>)}
        </section>
    );
}
